"""`specguard check` end to end: discover, prefilter, index, evaluate, suppress. Knows nothing about vLLM."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specguard._files import SOURCE_CAP, UnreadableFile, read_regular
from specguard._snapshots import user_cache_notes
from specguard.analysis.cache import Cache
from specguard.analysis.handed import RuleSet
from specguard.analysis.index import ProjectIndex, Unresolved
from specguard.analysis.judge import Judge, Judged
from specguard.analysis.parallel import Job, Workers, cores
from specguard.analysis.scan import FileScan, digest_of, scan_bytes, scan_file, stamp_of
from specguard.analysis.summary import ModuleSummary
from specguard.analysis.suppress import CheckedFiles, FileExemption, file_exemption, is_suppressed
from specguard.errors import SourceError
from specguard.file_facts import FileFacts
from specguard.findings import Finding, Judgement, source_error
from specguard.fixes.line_length import DEFAULT as DEFAULT_LINE_LENGTH
from specguard.fixes.line_length import LineLengths
from specguard.lines import comment_lines
from specguard.program.discover import Discovery, discover, force_excluded
from specguard.program.modules import ModuleLocator
from specguard.program.reading import UNSTAMPED, decode, read_stamped
from specguard.program.sparse import sparse_lines
from specguard.settings import Settings

if TYPE_CHECKING:
    from specguard.packs import Pack

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
    warnings: list[str] = field(default_factory=list)  # the user's own mistakes that cost nothing yet (a stray noqa)
    files: int = 0
    parsed: int = 0
    undecided: list[tuple[str, Judgement]] = field(default_factory=list)  # sites a rule could not decide, by file
    not_judged: list[tuple[str, str]] = field(default_factory=list)  # files over the per-file budget, and why
    project: _Run | None = field(default=None, repr=False)  # what the fixer re-checks a fixed file against
    discovery: Discovery | None = field(default=None, repr=False)  # the files found, and whether that was all

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
    rules: RuleSet,
    codes: frozenset[str],
    mentions: frozenset[str],
    definitions: list[tuple[int, int]],
) -> Outcome:
    from specguard.analysis.evaluate import evaluate_file  # libcst loads only when a file needs it

    try:
        return evaluate_file(path, data, facts, pack, rules, codes, mentions, definitions), None
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


def _warm_up(rules: RuleSet) -> None:
    """Runs first in each worker: import libcst and the rules on it while the main process scans files."""
    import libcst  # noqa: F401

    from specguard.analysis import evaluate  # noqa: F401
    from specguard.fixes.from_cst import checked_fix  # noqa: F401
    from specguard.program.positions import spans  # noqa: F401

    for code in set(rules.codes) - rules.evaluated:
        rules.load(code)


class _Run:
    """One `specguard check`: the stages share the cache, the index, the worker processes and the files' bytes.

    Each file is read once per run and every stage (its summary, the evaluator's reading of it as a module of the
    project, the rules, suppressions, baselines, fixes) works on those bytes, so a file saved during the run is
    seen whole as it was or as it is, never half one and half the other; a result is cached under the digest of
    the bytes it came from.
    """

    def __init__(self, settings: Settings, pack: Pack, rules: RuleSet, use_cache: bool) -> None:
        self.settings, self.pack, self.rules = settings, pack, rules
        self.codes = frozenset(settings.enabled(rules.codes))
        cache_root = settings.cache_dir or settings.root / ".specguard_cache"
        self.cache = Cache(None)
        if use_cache:  # walked beneath the project's root when it lies inside the project
            self.cache = Cache.at(cache_root, pack.fingerprint, settings.fingerprint(), settings.root)
        self.locator = ModuleLocator()
        self.index = ProjectIndex(self.locator, self._load_summary)
        self._judge: Judge | None = None
        self._borrowed_seen: tuple[int, set[str]] = (-1, set())
        self.scans: dict[str, FileScan] = {}
        self.borrowed: dict[str, FileScan] = {}  # modules read for an ancestor class or the sink
        self.sources: dict[str, bytes] = {}  # the bytes the run's stages use, of each file whose content they use
        self._stamps: dict[str, tuple[int, int]] = {}  # of the bytes read for the evaluator alone
        self._spellings: dict[str, str] = {}  # absolute path -> the path the run knows its bytes by
        self._texts: dict[str, list[str]] = {}
        self._exemptions: dict[str, FileExemption] = {}
        self._comment_lines: dict[str, dict[int, int]] = {}
        self._names_code: dict[tuple[str, str], bool] = {}
        self.notes: list[str] = [*user_cache_notes(), *self.cache.notes]
        self.line_lengths = LineLengths()

    def scan(
        self, files: list[str], workers: Callable[[int], Workers], given: dict[str, bytes] | None = None
    ) -> Workers:
        """Stage one: prefilter and summarize, reusing scans whose (size, mtime) did not change. A file whose bytes
        are `given` (standard input, named by `--stdin-filename`) is those bytes, whatever the disk holds there."""
        todo = []
        for path, data in (given or {}).items():
            self._keep(scan_bytes(path, data, UNSTAMPED, self.pack.needles, self.pack.needle_groups), data)
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
        for scan, data in scans:
            self._keep(scan, data)
        for scan in self.scans.values():
            self._index(scan)
        return pool

    def _index(self, scan: FileScan) -> None:
        """A module's summary into the project's index, where other modules' imports find it. A stub (`.pyi`) is
        checked as a file but never stands for its module: its bodies are `...`, and the module's own source (a
        `.py` beside it, or an installed one) is what runs."""
        if scan.summary is not None and not scan.path.endswith(".pyi"):
            self.index.add(scan.summary, scan.root)
            self.locator.add(scan.summary.module, Path(scan.path), scan.root)

    def _keep(self, scan: FileScan, data: bytes | None) -> None:
        self.scans[scan.path] = scan
        if data is not None:
            self._hold(scan.path, data)
        self.cache.put_scan(scan.path, scan)

    def _hold(self, path: str, data: bytes) -> None:
        """Keep a file's bytes for the run's later stages, also where they spell its path another way."""
        self.sources[path] = data
        self._spellings.setdefault(os.path.abspath(path), path)

    def _load_summary(self, path: Path) -> ModuleSummary | None:
        """A module without a pack name, read only because an ancestor class or the sink lives there."""
        key = self._spelling(path)
        cached = self.cache.scans.get(key)
        try:
            fresh = cached is not None and cached.summary is not None and cached.stamp == stamp_of(path)
        except OSError:
            fresh = False
        if not fresh and key in self.sources:  # the evaluator read it first: the summary is of those bytes
            cached = scan_bytes(
                key, self.sources[key], self._stamps.get(key, UNSTAMPED), self.pack.needles, summarize_always=True
            )
            self.cache.put_scan(key, cached)
        elif not fresh:  # a prefiltered-out scan has no summary; read the file in full this once
            cached, data = scan_file(key, self.pack.needles, summarize_always=True)
            if data is not None:
                self._hold(key, data)
            self.cache.put_scan(key, cached)
        self.borrowed[key] = cached
        return cached.summary

    def _spelling(self, path: Path | str) -> str:
        """The path the run knows a file by (as discovered, or as first read), however `path` spells it."""
        key = str(path)
        if key in self.sources or key in self.scans:  # the common case: the run's own spelling
            return key
        return self._spellings.setdefault(os.path.abspath(key), key)

    def module_bytes(self, path: Path) -> tuple[bytes, tuple[int, int]] | None:
        """A module the evaluator reads, as the run's other stages see it: the bytes its scan was made from, or,
        for a file no stage has needed whole, read now (once: later stages use the same bytes); with their
        stamp. None where it is unreadable, or changed since its scan (then said once)."""
        key = self._spelling(path)
        scan = self.scans.get(key) or self.borrowed.get(key)
        if scan is not None and scan.digest:
            data = self._bytes_of(scan)
            if data is None:
                self.notes.append(f"{key} changed while specguard was checking it; run specguard again")
                return None
            return data, scan.stamp
        if key not in self.sources:
            try:
                data, self._stamps[key] = read_stamped(key)
            except SourceError:
                return None
            self._hold(key, data)
        return self.sources[key], self._stamps.get(key, UNSTAMPED)

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
            self._hold(scan.path, data)
        return data

    def _current(self, scan: FileScan) -> tuple[FileScan, bytes | None]:
        """`scan` and its bytes; for a cached scan of a file saved since, the scan of the file as it is now
        (summarized into the index again), so that its rules never run on bytes its summary did not see."""
        data = self._bytes_of(scan)
        if data is not None:
            return scan, data
        fresh, data = scan_file(scan.path, self.pack.needles, self.pack.needle_groups)
        self._keep(fresh, data)
        self._index(fresh)
        return fresh, data

    def _borrowed_tops(self) -> set[str]:
        """Top-level packages outside the checked paths that define a class the pack names (the speculator bases an
        out-of-tree plugin builds on): the installed packages an evaluation may read."""
        if self._borrowed_seen[0] == len(self.borrowed):
            return self._borrowed_seen[1]
        names = set(self.pack.speculators.bases)
        tops = set()
        for scan in self.borrowed.values():
            summary = scan.summary
            if summary is not None and names & {c.rpartition(".")[2] for c in summary.classes}:
                tops.add(summary.module.partition(".")[0])
        self._borrowed_seen = (len(self.borrowed), tops)
        return tops

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            reader = self.module_bytes
            self._judge = Judge(
                self.locator, self.pack, self.rules, self.codes, self.cache, self._borrowed_tops, reader
            )
        return self._judge

    def evaluate(self, result: CheckResult, pool: Workers) -> None:
        """Stage two: the files some enabled rule can match, evaluated (or taken from the cache). A file goes to
        the workers for the rules on libcst as soon as its facts are known; meanwhile this process judges the
        files (the rules on the evaluator need the whole project in view: see `_judge_all`), and their judgements
        then go to the workers too, to be reported with their fixes. Every job carries the bytes stage one read."""
        jobs: list[Job] = []
        keys: dict[str, str] = {}
        live_results: set[str] = set()
        cst_codes, judged_codes = self.codes - self.rules.evaluated, self.codes & self.rules.judged

        def settle(scan: FileScan, facts: FileFacts) -> str:
            """Record a file's judgements; the key of its findings."""
            result.undecided.extend((scan.path, j) for j in facts.judgements if not j.decided)
            keys[scan.path] = _result_key(scan, facts, self.codes)
            live_results.add(keys[scan.path])
            return keys[scan.path]

        def produce() -> Iterator[Job]:
            staged = []
            for scan in list(self.scans.values()):
                if scan.not_judged is not None:  # over the per-file budget: named and counted, never parsed
                    result.not_judged.append((scan.path, scan.not_judged))
                    continue
                todo = self._stage_two(scan, result.findings, settle)
                if todo is None:
                    continue
                scan, data, facts, _ = todo
                definitions = scan.summary.definitions if scan.summary is not None else []
                jobs.append((scan.path, data, facts, self.pack, self.rules, cst_codes, scan.mentions, definitions))
                yield jobs[-1]
                staged.append((*todo, definitions))
            judged = self._judge_all([(scan, facts) for scan, _, facts, known, _ in staged if known is None], pool)
            for scan, data, _, known, definitions in staged:
                if known is None:
                    known = judged[scan.path]
                    settle(scan, known)
                if any(j.decided for j in known.judgements):
                    path = scan.path
                    jobs.append((path, data, known, self.pack, self.rules, judged_codes, scan.mentions, definitions))
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
        unsaved = self.cache.save(set(self.scans) | set(self.borrowed), live_results)
        result.notes.extend(dict.fromkeys([*self.notes, *([unsaved] if unsaved else [])]))

    def _judge_all(self, pending: list[tuple[FileScan, FileFacts]], pool: Workers) -> dict[str, FileFacts]:
        """Each pending file's facts with its judgements. On a run with workers, this process and one forked from
        it judge them side by side, largest file first (each evaluation is independent of the others; the
        modules both read are parsed in each); what the other computed is recorded here."""
        if not self.judge.codes:
            return {scan.path: facts for scan, facts in pending}
        pending = sorted(pending, key=lambda item: -item[0].stamp[0])

        def judged(i: int) -> Judged:
            scan, facts = pending[i]
            return self.judge.judged(scan.path, scan.root, facts, scan.mentions, scan.digest)

        outcomes = pool.shared(judged, len(pending))
        return {scan.path: self.judge.keep(scan.path, got) for (scan, _), got in zip(pending, outcomes, strict=True)}

    def _stage_two(
        self, scan: FileScan, findings: list[Finding], settle: Callable[[FileScan, FileFacts], str]
    ) -> tuple[FileScan, bytes, FileFacts, FileFacts | None] | None:
        """What the rules need for a file (its scan, bytes, facts, and those facts with its judgements where the
        cache has them), or None when its findings are known already (added to `findings`: SG000, or the cached
        result) or it has none to look for. `settle` records judgements and gives the result key."""
        while True:  # twice at most: a cached scan of a file saved since is replaced by the file's scan as it is now
            if scan.error is not None:
                findings.append(source_error(scan.path, scan.error, scan.error_line))
                return None
            if scan.summary is None or not scan.mentions:
                return None
            facts = self.index.facts(scan.summary, scan.root, self.pack, scan.call_owners)
            facts = dataclasses.replace(facts, line_length=self.line_lengths.of(scan.path))
            known = self.judge.cached(scan.path, facts, scan.digest)
            key = _result_key(scan, known, self.codes) if known is not None else None
            cached = self.cache.results.get(key) if key is not None else None
            if cached == []:
                settle(scan, known)  # type: ignore[arg-type]
                return None  # nothing found, so nothing to suppress or fix: the file need not be read
            now, data = self._current(scan)
            if now is scan and data is not None:
                if known is not None:
                    settle(scan, known)
                if cached is not None:
                    findings.extend(cached)
                    return None
                return scan, data, facts, known
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

    def comment_line(self, path: str, number: int, code: str) -> int:
        """The line a suppression of `code` for line `number` is read on (lines.comment_lines), in the file as
        checked. A file whose text never names the code cannot suppress it on a line, so it is not tokenized."""
        named = self._names_code.get((path, code))
        if named is None:  # once per file and code: a file may hold thousands of findings
            named = self._names_code[(path, code)] = code.lower() in "".join(self._lines(path)).lower()
        if not named:
            return number
        moved = self._comment_lines.get(path)
        if moved is None:
            moved = self._comment_lines[path] = comment_lines("".join(self._lines(path)))
        return moved.get(number, number)

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
        return _evaluate_text(
            text, path, module, is_package, self.index, self.pack, self.rules, self.codes, self.judge, scan.root, length
        )


def check_paths(
    paths: Sequence[str | Path], settings: Settings, pack: Pack, rules: RuleSet, *, use_cache: bool = True
) -> CheckResult:
    """A check of `paths` with the pack and the rules it is handed (specguard/composition.py composes them)."""
    run = _Run(settings, pack, rules, use_cache)
    found = discover_files(paths, settings)
    result = CheckResult(errors=list(found.errors), notes=list(found.notes), files=len(found.files), discovery=found)

    def workers(files_to_scan: int) -> Workers:
        # Only a cold run over a large tree pays for processes; a warm run or a pre-commit batch stays local.
        extra = cores() - 1 if files_to_scan >= _PARALLEL_MIN_FILES else 0
        return Workers(extra, warm_up=functools.partial(_warm_up, rules))

    with run.scan(found.files, workers) as pool:
        run.evaluate(result, pool)
    result.findings.extend(source_error(path, why) for path, why in found.unreadable)
    return _finished(result, run, found.warnings)


def check_given(path: str, data: bytes, settings: Settings, pack: Pack, rules: RuleSet) -> CheckResult:
    """A check of one file's bytes given in memory (standard input) under the name `path`, against the project
    around that name as `check_paths` sees it (the modules it imports are read from disk); never cached. A name
    the settings exclude under `--force-exclude` is not checked, as ruff skips it."""
    patterns = [*settings.exclude, *settings.extend_exclude]
    excluded = settings.force_exclude and force_excluded(path, patterns, settings.root)
    run = _Run(settings, pack, rules, use_cache=False)
    result = CheckResult(files=0 if excluded else 1)
    with run.scan([], lambda _: Workers(0), {} if excluded else {path: data}) as pool:
        run.evaluate(result, pool)
    return _finished(result, run, [])


def _finished(result: CheckResult, run: _Run, warnings: list[str]) -> CheckResult:
    """What every check ends with: its notes and warnings, and the findings and sites that are not suppressed."""
    settings = run.settings
    result.notes.extend(_unresolved_note(run, settings))
    # a misplaced `# specguard: noqa` is said where it matters: in a file that has findings
    result.warnings = [
        *warnings,
        *(w for path in sorted({f.path for f in result.findings}) for w in run.exemption(path).unused),
    ]
    result.notes.extend(run.line_lengths.notes())
    result.findings = sorted(f for f in result.findings if not _ignored(f, settings, run, run.codes))
    result.undecided = sorted(
        (path, j)
        for path, j in result.undecided
        if not _ignored(Finding(path, j.span[0], 1, j.code, ""), settings, run, run.codes)
    )
    result.not_judged.sort()
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


def _ignored(finding: Finding, settings: Settings, files: CheckedFiles, codes: frozenset[str]) -> bool:
    if finding.code != "SG000" and finding.code not in codes:
        return True
    return is_suppressed(finding, settings, files)


def check_source_judged(
    text: str,
    path: str = "example.py",
    module: str = "example",
    *,
    pack: Pack,
    rules: RuleSet,
    settings: Settings,
    line_length: int = DEFAULT_LINE_LENGTH,
) -> tuple[list[Finding], list[Judgement]]:
    """One in-memory module through the same index and rules, with nothing else in the project, its fixes laid
    out at `line_length`: its findings, and the sites the rules could not decide (what a run lists as "not
    decided"). What the rules' own examples and the property tests run; a source error comes back as SG000."""
    locator = ModuleLocator(installed=False)
    index = ProjectIndex(locator, lambda _: None)
    codes = frozenset(settings.enabled(rules.codes))
    judge = Judge(locator, pack, rules, codes, Cache(None), set)
    undecided: list[Judgement] = []
    findings = _evaluate_text(
        text, path, module, False, index, pack, rules, codes, judge, Path(), line_length, undecided
    )
    return sorted(findings), undecided


def _evaluate_text(
    text: str,
    path: str,
    module: str,
    is_package: bool,
    index: ProjectIndex,
    pack: Pack,
    rules: RuleSet,
    codes: frozenset[str],
    judge: Judge,
    root: Path = Path(),
    line_length: int = DEFAULT_LINE_LENGTH,
    undecided: list[Judgement] | None = None,
) -> list[Finding]:
    """A module's text, summarized into the index as stage one would and evaluated, without cache or prefilter;
    the sites left undecided go to `undecided` where it is given."""
    from specguard.analysis.evaluate import evaluate_source
    from specguard.analysis.scan import call_owners, signed
    from specguard.analysis.summary import nested_class_lines, summarize
    from specguard.program.reading import parse_ast

    data = text.encode()
    try:
        tree = parse_ast(text, path)
        summary = summarize(tree, module, is_package, nested_class_lines(data), signed(pack.needles))
    except SourceError as exc:
        return [source_error(path, str(exc), exc.line)]
    owners = call_owners(data, pack.needles)
    index.add(summary, root)
    facts = dataclasses.replace(index.facts(summary, root, pack, owners), line_length=line_length)
    mentions = frozenset(n.decode() for n in pack.needles if n.decode() in text)
    errors = len(judge.errors)
    known = judge.facts(path, root, facts, mentions, "", text=text)
    if len(judge.errors) > errors:  # an in-memory check has no report to put it in: it must not pass unseen
        raise RuntimeError(judge.errors[-1])
    # as a run does: libcst's job on the facts, the evaluator's on the judgements
    written = evaluate_source(text, path, facts, pack, rules, codes - rules.evaluated, mentions, summary.definitions)
    decided = [j for j in known.judgements if j.decided]
    if undecided is not None:
        undecided.extend(j for j in known.judgements if not j.decided)
    if not decided:
        return written
    judged = evaluate_source(text, path, known, pack, rules, codes & rules.judged, mentions, summary.definitions)
    return written + judged
