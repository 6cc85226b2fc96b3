"""`specguard check` end to end: discover, prefilter, index, evaluate, suppress. Knows nothing about vLLM."""

from __future__ import annotations

import dataclasses
import hashlib
import linecache
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.analysis.cache import Cache
from specguard.analysis.dataflow.values import FunctionFlow
from specguard.analysis.discover import Discovery, discover
from specguard.analysis.findings import Finding, source_error
from specguard.analysis.index import FileFacts, ProjectIndex, Unresolved
from specguard.analysis.modules import ModuleLocator
from specguard.analysis.parallel import Job, Workers, cores
from specguard.analysis.scan import FileScan, scan_file, stamp_of
from specguard.analysis.summary import ModuleSummary
from specguard.analysis.suppress import file_exemption, is_suppressed
from specguard.errors import SourceError
from specguard.fixes.line_length import DEFAULT as DEFAULT_LINE_LENGTH
from specguard.fixes.line_length import LineLengths
from specguard.packs import Pack, load_pack
from specguard.rules import ALL_CODES
from specguard.settings import Settings

# Below this many files to scan, forking workers costs more than it saves.
_PARALLEL_MIN_FILES = 200
# The main process's part of stage one: the workers start by importing libcst, so they take less.
_MAIN_SCAN_SHARE = 0.65


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the run could not see; not findings, not errors
    warnings: list[str] = field(default_factory=list)  # the user's own mistakes that cost nothing yet (a stray noqa)
    files: int = 0
    parsed: int = 0
    project: _Run | None = field(default=None, repr=False)  # what the fixer re-checks a fixed file against


_CRASH = "the parser crashed on this file (pathologically deep nesting?)"
Outcome = tuple[list[Finding], str | None]  # a file's findings, or the internal error that stopped its rules


def _evaluate(
    path: str,
    facts: FileFacts,
    pack: Pack,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> Outcome:
    from specguard.analysis.evaluate import evaluate_file  # libcst loads only when a file needs it

    try:
        return evaluate_file(path, facts, pack, codes, mentions, definitions), None
    except Exception as exc:  # noqa: BLE001 - a bug of ours in one file must not lose the other files' findings
        return [], f"{path}: internal error while analyzing: {type(exc).__name__}: {exc} (please report it)"


def _evaluate_crashed(job: tuple[Any, ...]) -> Outcome:
    return [source_error(job[0], _CRASH)], None


def _scan_crashed(job: tuple[Any, ...]) -> FileScan:
    return FileScan(job[0], (0, 0), error=_CRASH)


def _result_key(scan: FileScan, facts: FileFacts, codes: frozenset[str]) -> str:
    values = {f.name: getattr(facts, f.name) for f in dataclasses.fields(facts)}  # not cached lookups
    stable = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in values.items()}
    text = repr((scan.path, scan.digest, sorted(stable.items()), sorted(codes)))  # no set order: it varies
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _warm_up() -> None:
    """Runs first in each worker: import libcst and the rules while the main process scans files."""
    from specguard.analysis import evaluate  # noqa: F401
    from specguard.rules import all_rules

    all_rules()


class _Run:
    """One `specguard check`: the stages share the cache, the index and the worker processes."""

    def __init__(self, settings: Settings, pack: Pack, use_cache: bool) -> None:
        self.settings, self.pack = settings, pack
        self.codes = frozenset(settings.enabled(ALL_CODES))
        cache_root = settings.cache_dir or settings.root / ".specguard_cache"
        self.cache = Cache.at(cache_root, pack.fingerprint, settings.fingerprint()) if use_cache else Cache(None)
        self.locator = ModuleLocator()
        self.index = ProjectIndex(self.locator, self._load_summary, self._load_flows)
        self.scans: dict[str, FileScan] = {}
        self.borrowed: set[str] = set()
        self.line_lengths = LineLengths()

    def scan(self, files: list[str], workers: Callable[[int], Workers]) -> Workers:
        """Stage one: prefilter and summarize, reusing scans whose (size, mtime) did not change."""
        todo = []
        for path in files:
            cached = self.cache.scans.get(path)
            try:
                if cached is not None and cached.stamp == stamp_of(path):
                    self.scans[path] = cached
                    continue
            except OSError:
                pass
            todo.append((path, self.pack.needles, self.pack.needle_groups))
        pool = workers(len(todo))
        for scan in pool.run(scan_file, todo, on_crash=_scan_crashed, main_share=_MAIN_SCAN_SHARE):
            self.scans[scan.path] = scan
            if scan.stamp != (0, 0):
                self.cache.put_scan(scan.path, scan)
        for scan in self.scans.values():
            if scan.summary is not None:
                self.index.add(scan.summary, scan.root)
                self.locator.add(scan.summary.module, Path(scan.path), scan.root)
        return pool

    def _load_summary(self, path: Path) -> ModuleSummary | None:
        """A module without a pack name, read only because an ancestor class or the sink lives there."""
        key = str(path)
        cached = self.cache.scans.get(key)
        # A prefiltered-out scan has no summary; read the file in full this once.
        if cached is None or cached.summary is None or cached.stamp != stamp_of(path):
            cached = scan_file(key, self.pack.needles, summarize_always=True)
            self.cache.put_scan(key, cached)
        self.borrowed.add(key)
        return cached.summary

    def _load_flows(self, summary: ModuleSummary, root: Path) -> dict[str, FunctionFlow | None]:
        """The dataflow summaries of a module's functions, computed the first time a rule's facts need them
        and kept with its cached scan."""
        from specguard.analysis.source import decode, parse_ast, read_bytes
        from specguard.analysis.summary import function_flows

        found = self.locator.find(summary.module, root)
        if found is None:
            return {}
        path = found[0]
        try:
            tree = parse_ast(decode(read_bytes(path)), str(path))
        except SourceError:
            return {}  # changed or gone since it was scanned: no summaries this run
        flows = function_flows(summary, tree, self.pack.padding_flow)
        scan = self.scans.get(str(path)) or self.cache.scans.get(str(path))
        if scan is not None and scan.summary is summary:
            self.cache.put_scan(str(path), scan)  # the cached scan now carries them
        return flows

    def evaluate(self, result: CheckResult, pool: Workers) -> None:
        """Stage two: the files some enabled rule can match, evaluated (or taken from the cache). Each file goes
        to the workers as soon as its facts are known, so libcst there overlaps the dataflow facts computed here."""
        jobs, keys, live_results = [], {}, set()

        def produce() -> Iterator[Job]:
            for path, scan in self.scans.items():
                if scan.error is not None:
                    result.findings.append(source_error(path, scan.error, scan.error_line))
                    continue
                if scan.summary is None or not scan.mentions:
                    continue
                facts = self.index.facts(scan.summary, scan.root, self.pack, scan.call_owners)
                facts = dataclasses.replace(facts, line_length=self.line_lengths.of(path))
                key = _result_key(scan, facts, self.codes)
                live_results.add(key)
                if key in self.cache.results:
                    result.findings.extend(self.cache.results[key])
                    continue
                keys[path] = key
                jobs.append((path, facts, self.pack, self.codes, scan.mentions, scan.summary.definitions))
                yield jobs[-1]

        # With workers, libcst's native parser runs only there: a fault in it must not take the run down.
        outcomes = pool.run_as_produced(_evaluate, produce(), on_crash=_evaluate_crashed)
        result.parsed = len(jobs)
        for job, (findings, error) in zip(jobs, outcomes, strict=True):
            if error is not None:
                result.errors.append(error)
                continue
            self.cache.put_result(keys[job[0]], findings)
            result.findings.extend(findings)
        self.cache.save(set(self.scans) | self.borrowed, live_results)

    def digest(self, path: str) -> str | None:
        """The content hash of the file as it was checked, None if it was never summarized."""
        scan = self.scans.get(path)
        return scan.digest if scan is not None and scan.summary is not None else None

    def recheck(self, path: str, text: str) -> list[Finding]:
        """Every finding of new text for a checked file (a fix's result), against the same project, unsuppressed."""
        scan = self.scans[path]
        assert scan.summary is not None
        module, is_package = scan.summary.module, scan.summary.is_package
        length = self.line_lengths.of(path)
        return _evaluate_text(text, path, module, is_package, self.index, self.pack, self.codes, scan.root, length)


def check_paths(
    paths: Sequence[str | Path], settings: Settings | None = None, *, use_cache: bool = True, pack: Pack | None = None
) -> CheckResult:
    settings = settings or Settings()
    run = _Run(settings, pack or load_pack(settings.rule_packs), use_cache)
    found = discover_files(paths, settings)
    result = CheckResult(errors=list(found.errors), files=len(found.files))

    def workers(files_to_scan: int) -> Workers:
        # Only a cold run over a large tree pays for processes; a warm run or a pre-commit batch stays local.
        extra = cores() - 1 if files_to_scan >= _PARALLEL_MIN_FILES else 0
        return Workers(extra, warm_up=_warm_up)

    with run.scan(found.files, workers) as pool:
        run.evaluate(result, pool)
    result.notes.extend(_unresolved_note(run.index.unresolved, run.pack, settings))
    # a misplaced `# specguard: noqa` is said where it matters: in a file that has findings
    result.warnings = [w for path in sorted({f.path for f in result.findings}) for w in file_exemption(path).unused]
    result.notes.extend(run.line_lengths.notes())
    result.findings = sorted(f for f in result.findings if not _ignored(f, settings))
    result.project = run
    return result


def discover_files(paths: Sequence[str | Path], settings: Settings) -> Discovery:
    """The files `check_paths` analyzes (what `--show-files` lists)."""
    patterns = [*settings.exclude, *settings.extend_exclude]
    return discover(
        [Path(p) for p in paths], patterns, settings.root, settings.force_exclude, settings.respect_gitignore
    )


def _unresolved_note(unresolved: dict[str, Unresolved], pack: Pack, settings: Settings) -> list[str]:
    """One line for the base classes whose module could not be located (a plugin's vLLM not installed), counting
    only subclasses whose body names what a speculator rule looks for: the others cannot get a finding anyway."""
    names = {*pack.metadata.sink, *pack.speculators.shared_helpers, *pack.dcp.prepare}
    relevant = sorted(u.base for u in unresolved.values() if _names_any(u, names))
    if not relevant:
        return []
    first = unresolved[relevant[0]]
    where = f"{settings.relative(first.path)}:{first.lines[0]}" if first.path else "?"
    more = f" ({len(relevant) - 1} more ancestors alike)" if len(relevant) > 1 else ""
    return [
        f"cannot locate `{first.base}`, an ancestor of `{first.subclass}` ({where}), under the checked paths or "
        f"in the packages installed for {sys.executable}: its subclasses are checked as if they were not "
        f"speculators{more}; install the package it comes from, or add its source to the paths checked"
    ]


def _names_any(unresolved: Unresolved, names: set[str]) -> bool:
    if unresolved.path is None:
        return False
    aliases = {local for local, target in unresolved.imports if target.rpartition(".")[2] in names}
    first, last = unresolved.lines
    body = "".join(linecache.getline(str(unresolved.path), n) for n in range(first, last + 1))
    return any(name in body for name in names | aliases)


def _ignored(finding: Finding, settings: Settings) -> bool:
    if finding.code != "SG000" and finding.code not in settings.enabled(ALL_CODES):
        return True
    return is_suppressed(finding, settings)


def check_source(
    text: str,
    path: str = "example.py",
    module: str = "example",
    *,
    pack: Pack | None = None,
    settings: Settings | None = None,
    line_length: int = DEFAULT_LINE_LENGTH,
) -> list[Finding]:
    """One in-memory module through the same index and rules, with nothing else in the project, its fixes laid
    out at `line_length`.

    What the rules' own examples and the property tests run; a source error comes back as SG000.
    """
    settings = settings or Settings()
    pack = pack or load_pack(settings.rule_packs)
    index = ProjectIndex(ModuleLocator(installed=False), lambda _: None)
    codes = frozenset(settings.enabled(ALL_CODES))
    return sorted(_evaluate_text(text, path, module, False, index, pack, codes, Path(), line_length))


def _evaluate_text(
    text: str,
    path: str,
    module: str,
    is_package: bool,
    index: ProjectIndex,
    pack: Pack,
    codes: frozenset[str],
    root: Path = Path(),
    line_length: int = DEFAULT_LINE_LENGTH,
) -> list[Finding]:
    """A module's text, summarized into the index as stage one would and evaluated, without cache or prefilter."""
    from specguard.analysis.evaluate import evaluate_source
    from specguard.analysis.scan import call_owners
    from specguard.analysis.source import parse_ast
    from specguard.analysis.summary import function_flows, nested_class_lines, summarize
    from specguard.errors import SourceError

    data = text.encode()
    try:
        tree = parse_ast(text, path)
        summary = summarize(tree, module, is_package, nested_class_lines(data))
    except SourceError as exc:
        return [source_error(path, str(exc), exc.line)]
    function_flows(summary, tree, pack.padding_flow)  # of this text: the index would read the file on disk
    owners = call_owners(data, pack.needles)
    index.add(summary, root)
    facts = dataclasses.replace(index.facts(summary, root, pack, owners), line_length=line_length)
    mentions = frozenset(n.decode() for n in pack.needles if n.decode() in text)
    return evaluate_source(text, path, facts, pack, codes, mentions, summary.definitions)
