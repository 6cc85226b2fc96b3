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
from specguard.analysis.discover import discover
from specguard.analysis.findings import Finding, Judgement, source_error
from specguard.analysis.index import FileFacts, ProjectIndex, Unresolved
from specguard.analysis.judge import Judge
from specguard.analysis.modules import ModuleLocator
from specguard.analysis.parallel import Job, Workers, cores
from specguard.analysis.scan import FileScan, scan_file, stamp_of
from specguard.analysis.summary import ModuleSummary
from specguard.analysis.suppress import is_suppressed
from specguard.errors import SourceError
from specguard.packs import Pack, load_pack
from specguard.rules import ALL_CODES, EVALUATED, load_rule
from specguard.settings import Settings

# Below this many files to scan, forking workers costs more than it saves.
_PARALLEL_MIN_FILES = 200
# The main process's part of stage one: the workers start by importing libcst, so they take less (and the main
# process judges the candidate files on the evaluator right after).
_MAIN_SCAN_SHARE = 0.55


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the run could not see; not findings, not errors
    files: int = 0
    parsed: int = 0
    undecided: list[tuple[str, Judgement]] = field(default_factory=list)  # sites a rule could not decide, by file
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
    """Runs first in each worker: import libcst and the rules on it while the main process scans files."""
    import libcst  # noqa: F401

    from specguard.analysis import evaluate  # noqa: F401
    from specguard.analysis.positions import spans  # noqa: F401
    from specguard.fixes.from_cst import checked_fix  # noqa: F401

    for code in set(ALL_CODES) - EVALUATED:
        load_rule(code)


class _Run:
    """One `specguard check`: the stages share the cache, the index and the worker processes."""

    def __init__(self, settings: Settings, pack: Pack, use_cache: bool) -> None:
        self.settings, self.pack = settings, pack
        self.codes = frozenset(settings.enabled(ALL_CODES))
        cache_root = settings.cache_dir or settings.root / ".specguard_cache"
        self.cache = Cache.at(cache_root, pack.fingerprint, settings.fingerprint()) if use_cache else Cache(None)
        self.locator = ModuleLocator()
        self.index = ProjectIndex(self.locator, self._load_summary)
        self._judge: Judge | None = None
        self._borrowed_seen: tuple[int, set[str]] = (-1, set())
        self.scans: dict[str, FileScan] = {}
        self.borrowed: set[str] = set()

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
        # Waiting for the workers' shards, this process loads what judging will need (the rules on the evaluator).
        scans = pool.run(
            scan_file, todo, on_crash=_scan_crashed, main_share=_MAIN_SCAN_SHARE, while_waiting=self.judge.load
        )
        for scan in scans:
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

    def _borrowed_tops(self) -> set[str]:
        """Top-level packages outside the checked paths that define a class the pack names (the speculator bases an
        out-of-tree plugin builds on): the installed packages an evaluation may read."""
        if self._borrowed_seen[0] == len(self.borrowed):
            return self._borrowed_seen[1]
        names = set(self.pack.speculators.bases)
        tops = set()
        for path in self.borrowed:
            scan = self.cache.scans.get(path)
            summary = scan.summary if scan is not None else None
            if summary is not None and names & {c.rpartition(".")[2] for c in summary.classes}:
                tops.add(summary.module.partition(".")[0])
        self._borrowed_seen = (len(self.borrowed), tops)
        return tops

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            self._judge = Judge(self.locator, self.pack, self.codes, self.cache, self._borrowed_tops)
        return self._judge

    def evaluate(self, result: CheckResult, pool: Workers) -> None:
        """Stage two: the files some enabled rule can match, evaluated (or taken from the cache). A file goes to
        the workers for the rules on libcst as soon as its facts are known, and this process judges it meanwhile
        (the rules on the evaluator need the whole project in view); its judgements then go to the workers too,
        to be reported with their fixes."""
        jobs: list[Job] = []
        keys: dict[str, str] = {}
        live_results: set[str] = set()
        cst_codes, judged_codes = self.codes - EVALUATED, self.codes & EVALUATED

        def settle(path: str, scan: FileScan, facts: FileFacts) -> str:
            """Record a file's judgements; the key of its findings."""
            result.undecided.extend((path, j) for j in facts.judgements if not j.decided)
            keys[path] = _result_key(scan, facts, self.codes)
            live_results.add(keys[path])
            return keys[path]

        def produce() -> Iterator[Job]:
            for path, scan in self.scans.items():
                if scan.error is not None:
                    result.findings.append(source_error(path, scan.error, scan.error_line))
                    continue
                if scan.summary is None or not scan.mentions:
                    continue
                facts = self.index.facts(scan.summary, scan.root, self.pack, scan.call_owners)
                known = self.judge.cached(path, facts, scan.digest)
                if known is not None and settle(path, scan, known) in self.cache.results:
                    result.findings.extend(self.cache.results[keys[path]])
                    continue
                definitions = scan.summary.definitions
                jobs.append((path, facts, self.pack, cst_codes, scan.mentions, definitions))
                yield jobs[-1]
                if known is None:
                    known = self.judge.facts(path, scan.root, facts, scan.mentions, scan.digest)
                    settle(path, scan, known)
                if any(j.decided for j in known.judgements):
                    jobs.append((path, known, self.pack, judged_codes, scan.mentions, definitions))
                    yield jobs[-1]

        # With workers, libcst's native parser runs only there: a fault in it must not take the run down.
        outcomes = pool.run_as_produced(_evaluate, produce(), on_crash=_evaluate_crashed)
        result.errors.extend(self.judge.errors)
        result.parsed = len({job[0] for job in jobs})
        per_file: dict[str, list[Finding]] = {}
        failed: set[str] = set()
        for job, (findings, error) in zip(jobs, outcomes, strict=True):
            if error is not None and job[0] not in failed:  # one line per file, whichever of its jobs failed
                result.errors.append(error)
            if error is not None:
                failed.add(job[0])
            else:
                per_file.setdefault(job[0], []).extend(findings)
        for path, findings in per_file.items():
            if path in failed:
                continue
            unreadable = list(dict.fromkeys(f for f in findings if f.code == "SG000"))
            findings = unreadable or findings  # a file libcst cannot read is reported as that alone
            self.cache.put_result(keys[path], findings)
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
        return _evaluate_text(text, path, module, is_package, self.index, self.pack, self.codes, scan.root, self.judge)


def check_paths(
    paths: Sequence[str | Path], settings: Settings | None = None, *, use_cache: bool = True, pack: Pack | None = None
) -> CheckResult:
    settings = settings or Settings()
    run = _Run(settings, pack or load_pack(settings.rule_packs), use_cache)
    found = discover([Path(p) for p in paths], settings.exclude, settings.root, settings.force_exclude)
    result = CheckResult(errors=list(found.errors), files=len(found.files))

    def workers(files_to_scan: int) -> Workers:
        # Only a cold run over a large tree pays for processes; a warm run or a pre-commit batch stays local.
        extra = cores() - 1 if files_to_scan >= _PARALLEL_MIN_FILES else 0
        return Workers(extra, warm_up=_warm_up)

    with run.scan(found.files, workers) as pool:
        run.evaluate(result, pool)
    result.notes.extend(_unresolved_note(run.index.unresolved, run.pack, settings))
    result.findings = sorted(f for f in result.findings if not _ignored(f, settings))
    result.undecided = sorted(
        (path, j) for path, j in result.undecided if not _ignored(Finding(path, j.span[0], 1, j.code, ""), settings)
    )
    result.project = run
    return result


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
) -> list[Finding]:
    """One in-memory module through the same index and rules, with nothing else in the project.

    What the rules' own examples and the property tests run; a source error comes back as SG000.
    """
    settings = settings or Settings()
    pack = pack or load_pack(settings.rule_packs)
    locator = ModuleLocator(installed=False)
    index = ProjectIndex(locator, lambda _: None)
    codes = frozenset(settings.enabled(ALL_CODES))
    judge = Judge(locator, pack, codes, Cache(None), set)
    return sorted(_evaluate_text(text, path, module, False, index, pack, codes, Path(), judge))


def _evaluate_text(
    text: str,
    path: str,
    module: str,
    is_package: bool,
    index: ProjectIndex,
    pack: Pack,
    codes: frozenset[str],
    root: Path,
    judge: Judge,
) -> list[Finding]:
    """A module's text, summarized into the index as stage one would and evaluated, without cache or prefilter."""
    from specguard.analysis.evaluate import evaluate_source
    from specguard.analysis.scan import call_owners
    from specguard.analysis.source import parse_ast
    from specguard.analysis.summary import nested_class_lines, summarize

    data = text.encode()
    try:
        tree = parse_ast(text, path)
        summary = summarize(tree, module, is_package, nested_class_lines(data))
    except SourceError as exc:
        return [source_error(path, str(exc), exc.line)]
    owners = call_owners(data, pack.needles)
    index.add(summary, root)
    facts = index.facts(summary, root, pack, owners)
    mentions = frozenset(n.decode() for n in pack.needles if n.decode() in text)
    errors = len(judge.errors)
    facts = judge.facts(path, root, facts, mentions, "", text=text)
    if len(judge.errors) > errors:  # an in-memory check has no report to put it in: it must not pass unseen
        raise RuntimeError(judge.errors[-1])
    return evaluate_source(text, path, facts, pack, codes, mentions, summary.definitions)
