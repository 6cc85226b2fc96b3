"""`specguard check` end to end: discover, prefilter, index, evaluate, suppress. Knows nothing about vLLM."""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard._files import SOURCE_CAP, UnreadableFile, read_regular
from specguard.analysis.cache import Cache
from specguard.analysis.dataflow.values import FunctionFlow
from specguard.analysis.discover import Discovery, discover
from specguard.analysis.findings import Finding, source_error
from specguard.analysis.index import FileFacts, ProjectIndex, Unresolved
from specguard.analysis.modules import ModuleLocator
from specguard.analysis.parallel import Job, Workers, cores
from specguard.analysis.scan import FileScan, digest_of, scan_file, stamp_of
from specguard.analysis.source import UNSTAMPED, decode, read_stamped
from specguard.analysis.sparse import sparse_lines
from specguard.analysis.summary import ModuleSummary
from specguard.analysis.suppress import CheckedFiles, FileExemption, file_exemption, is_suppressed
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

    def line(self, path: str, number: int) -> str:
        """A line of a file as this run checked it (what baselines match findings by)."""
        return self.project.line(path, number) if self.project is not None else ""


_CRASH = "the parser crashed on this file (pathologically deep nesting?)"
Outcome = tuple[list[Finding], str | None]  # a file's findings, or the internal error that stopped its rules


def _evaluate(
    path: str,
    data: bytes,
    facts: FileFacts,
    pack: Pack,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> Outcome:
    from specguard.analysis.evaluate import evaluate_file  # libcst loads only when a file needs it

    try:
        return evaluate_file(path, data, facts, pack, codes, mentions, definitions), None
    except Exception as exc:  # noqa: BLE001 - a bug of ours in one file must not lose the other files' findings
        return [], f"{path}: internal error while analyzing: {type(exc).__name__}: {exc} (please report it)"


def _evaluate_crashed(job: tuple[Any, ...]) -> Outcome:
    return [source_error(job[0], _CRASH)], None


def _scan_crashed(job: tuple[Any, ...]) -> tuple[FileScan, bytes | None]:
    return FileScan(job[0], UNSTAMPED, error=_CRASH), None


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
    """One `specguard check`: the stages share the cache, the index, the worker processes and the files' bytes.

    Each file is read once per run and every stage (its summary, the dataflow summaries, the rules, suppressions,
    baselines, fixes) works on those bytes, so a file saved during the run is seen whole as it was or as it is,
    never half one and half the other; a result is cached under the digest of the bytes it came from.
    """

    def __init__(self, settings: Settings, pack: Pack, use_cache: bool) -> None:
        self.settings, self.pack = settings, pack
        self.codes = frozenset(settings.enabled(ALL_CODES))
        cache_root = settings.cache_dir or settings.root / ".specguard_cache"
        self.cache = Cache.at(cache_root, pack.fingerprint, settings.fingerprint()) if use_cache else Cache(None)
        self.locator = ModuleLocator()
        self.index = ProjectIndex(self.locator, self._load_summary, self._load_flows)
        self.scans: dict[str, FileScan] = {}
        self.borrowed: dict[str, FileScan] = {}  # modules read for an ancestor class or the sink
        self.sources: dict[str, bytes] = {}  # the bytes the run's stages use, of each file whose content they use
        self._texts: dict[str, list[str]] = {}
        self._exemptions: dict[str, FileExemption] = {}
        self.notes: list[str] = list(self.cache.notes)
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
        for scan, data in pool.run(scan_file, todo, on_crash=_scan_crashed, main_share=_MAIN_SCAN_SHARE):
            self._keep(scan, data)
        for scan in self.scans.values():
            if scan.summary is not None:
                self.index.add(scan.summary, scan.root)
                self.locator.add(scan.summary.module, Path(scan.path), scan.root)
        return pool

    def _keep(self, scan: FileScan, data: bytes | None) -> None:
        self.scans[scan.path] = scan
        if data is not None:
            self.sources[scan.path] = data
        self.cache.put_scan(scan.path, scan)

    def _load_summary(self, path: Path) -> ModuleSummary | None:
        """A module without a pack name, read only because an ancestor class or the sink lives there."""
        key = str(path)
        cached = self.cache.scans.get(key)
        try:
            fresh = cached is not None and cached.summary is not None and cached.stamp == stamp_of(path)
        except OSError:
            fresh = False
        if not fresh:  # a prefiltered-out scan has no summary; read the file in full this once
            cached, data = scan_file(key, self.pack.needles, summarize_always=True)
            if data is not None:
                self.sources[key] = data
            self.cache.put_scan(key, cached)
        self.borrowed[key] = cached
        return cached.summary

    def _load_flows(self, summary: ModuleSummary, root: Path) -> dict[str, FunctionFlow | None]:
        """The dataflow summaries of a module's functions, computed the first time a rule's facts need them
        and kept with its cached scan."""
        from specguard.analysis.source import decode, parse_ast
        from specguard.analysis.summary import function_flows

        found = self.locator.find(summary.module, root)
        if found is None:
            return {}
        path = str(found[0])
        scan = next((s for s in (self.scans.get(path), self.borrowed.get(path)) if s and s.summary is summary), None)
        if scan is None:
            return {}
        data = self._bytes_of(scan)
        try:
            if data is None:
                raise SourceError("changed since it was scanned")
            tree = parse_ast(decode(data), path)
        except SourceError:
            self.notes.append(f"{path} changed while specguard was checking it; run specguard again")
            return {}  # not summaries of other bytes than the module's summary came from
        flows = function_flows(summary, tree, self.pack.padding_flow)
        self.cache.put_scan(path, scan)  # the cached scan now carries them
        return flows

    def _bytes_of(self, scan: FileScan) -> bytes | None:
        """The bytes `scan` was made from: kept from this run, or read now; None when the file no longer holds
        them (a scan from the cache, of a file saved since)."""
        data = self.sources.get(scan.path)
        if data is None:
            try:
                data = read_stamped(scan.path)[0]
            except SourceError:
                return None
            if digest_of(data) != scan.digest:
                return None
            self.sources[scan.path] = data
        return data

    def _current(self, scan: FileScan) -> tuple[FileScan, bytes | None]:
        """`scan` and its bytes; for a cached scan of a file saved since, the scan of the file as it is now
        (summarized into the index again), so that its rules never run on bytes its summary did not see."""
        data = self._bytes_of(scan)
        if data is not None:
            return scan, data
        fresh, data = scan_file(scan.path, self.pack.needles, self.pack.needle_groups)
        self._keep(fresh, data)
        if fresh.summary is not None:
            self.index.add(fresh.summary, fresh.root)
        return fresh, data

    def evaluate(self, result: CheckResult, pool: Workers) -> None:
        """Stage two: the files some enabled rule can match, evaluated (or taken from the cache). Each file goes
        to the workers as soon as its facts are known, so libcst there overlaps the dataflow facts computed here."""
        jobs, keys, live_results = [], {}, set()

        def produce() -> Iterator[Job]:
            for scan in list(self.scans.values()):
                todo = self._stage_two(scan, result.findings, live_results)
                if todo is not None:
                    scan, data, facts, keys[scan.path] = todo
                    definitions = scan.summary.definitions if scan.summary is not None else []
                    jobs.append((scan.path, data, facts, self.pack, self.codes, scan.mentions, definitions))
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
        result.notes.extend(self.notes)
        self.cache.save(set(self.scans) | set(self.borrowed), live_results)

    def _stage_two(
        self, scan: FileScan, findings: list[Finding], live: set[str]
    ) -> tuple[FileScan, bytes, FileFacts, str] | None:
        """What the rules need for a file (its scan, bytes, facts and result key), or None when its findings are
        known already (added to `findings`: SG000, or the cached result) or it has none to look for."""
        while True:  # twice at most: a cached scan of a file saved since is replaced by the file's scan as it is now
            if scan.error is not None:
                findings.append(source_error(scan.path, scan.error, scan.error_line))
                return None
            if scan.summary is None or not scan.mentions:
                return None
            facts = self.index.facts(scan.summary, scan.root, self.pack, scan.call_owners)
            facts = dataclasses.replace(facts, line_length=self.line_lengths.of(scan.path))
            key = _result_key(scan, facts, self.codes)
            cached = self.cache.results.get(key)
            if cached == []:
                live.add(key)
                return None  # nothing found, so nothing to suppress or fix: the file need not be read
            now, data = self._current(scan)
            if now is scan and data is not None:
                live.add(key)
                if cached is not None:
                    findings.extend(cached)
                    return None
                return scan, data, facts, key
            scan = now

    def source(self, path: str) -> bytes | None:
        """The bytes of the file as it was checked, None if its content was never needed."""
        return self.sources.get(path)

    def _lines(self, path: str) -> list[str]:
        """The file's lines as it was checked (read now, once, if its content was never needed)."""
        lines = self._texts.get(path)
        if lines is None:
            data = self.sources.get(path)
            if data is None:
                try:
                    data = read_regular(path, SOURCE_CAP)
                except UnreadableFile:
                    data = b""
            try:
                lines = sparse_lines(decode(data))  # CPython's newlines: a form feed does not end a line
            except SourceError:
                lines = []
            self._texts[path] = lines
        return lines

    def line(self, path: str, number: int) -> str:
        """Line `number` of the file as it was checked (for suppressions and baselines); "" where unknown."""
        lines = self._lines(path)
        return lines[number - 1] if 0 < number <= len(lines) else ""

    def exemption(self, path: str) -> FileExemption:
        """What the file's `# specguard: noqa` comments exempt, in the file as it was checked."""
        found = self._exemptions.get(path)
        if found is None:
            found = self._exemptions[path] = file_exemption(path, "".join(self._lines(path)))
        return found

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
    result.notes.extend(_unresolved_note(run, settings))
    # a misplaced `# specguard: noqa` is said where it matters: in a file that has findings
    result.warnings = [w for path in sorted({f.path for f in result.findings}) for w in run.exemption(path).unused]
    result.notes.extend(run.line_lengths.notes())
    result.findings = sorted(f for f in result.findings if not _ignored(f, settings, run))
    result.project = run
    return result


def discover_files(paths: Sequence[str | Path], settings: Settings) -> Discovery:
    """The files `check_paths` analyzes (what `--show-files` lists)."""
    patterns = [*settings.exclude, *settings.extend_exclude]
    return discover(
        [Path(p) for p in paths], patterns, settings.root, settings.force_exclude, settings.respect_gitignore
    )


def _unresolved_note(run: _Run, settings: Settings) -> list[str]:
    """One line for the base classes whose module could not be located (a plugin's vLLM not installed), counting
    only subclasses whose body names what a speculator rule looks for: the others cannot get a finding anyway."""
    pack, unresolved = run.pack, run.index.unresolved
    names = {*pack.metadata.sink, *pack.speculators.shared_helpers, *pack.dcp.prepare}
    relevant = sorted(u.base for u in unresolved.values() if _names_any(u, names, run.line))
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


def _names_any(unresolved: Unresolved, names: set[str], line: Callable[[str, int], str]) -> bool:
    if unresolved.path is None:
        return False
    aliases = {local for local, target in unresolved.imports if target.rpartition(".")[2] in names}
    first, last = unresolved.lines
    body = "".join(line(str(unresolved.path), n) for n in range(first, last + 1))
    return any(name in body for name in names | aliases)


def _ignored(finding: Finding, settings: Settings, files: CheckedFiles) -> bool:
    if finding.code != "SG000" and finding.code not in settings.enabled(ALL_CODES):
        return True
    return is_suppressed(finding, settings, files)


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
