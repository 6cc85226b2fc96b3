"""`specguard check` end to end: discover, prefilter, index, evaluate, suppress. Knows nothing about vLLM."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.analysis.cache import Cache
from specguard.analysis.discover import discover
from specguard.analysis.findings import Finding, source_error
from specguard.analysis.index import FileFacts, ProjectIndex
from specguard.analysis.modules import ModuleLocator
from specguard.analysis.parallel import run_sharded
from specguard.analysis.scan import FileScan, scan_file, stamp_of
from specguard.analysis.summary import ModuleSummary
from specguard.analysis.suppress import is_suppressed
from specguard.packs import Pack, load_pack
from specguard.rules import ALL_CODES
from specguard.settings import Settings

# Below this much work a process pool costs more than it saves.
_PARALLEL_MIN_FILES = 200
_PARALLEL_MIN_CANDIDATES = 4


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    files: int = 0
    parsed: int = 0


_CRASH = "the parser crashed on this file (pathologically deep nesting?)"
Outcome = tuple[list[Finding], str | None]  # a file's findings, or the internal error that stopped its rules


def _evaluate(path: str, facts: FileFacts, pack: Pack, codes: frozenset[str], mentions: frozenset[str],
              definitions: list[tuple[int, int]]) -> Outcome:
    from specguard.analysis.evaluate import evaluate_file  # libcst loads only when a file needs it

    try:
        return evaluate_file(path, facts, pack, codes, mentions, definitions), None
    except Exception as exc:  # noqa: BLE001 - a bug of ours in one file must not lose the other files' findings
        return [], f"{path}: internal error while analyzing: {type(exc).__name__}: {exc} (please report it)"


def _file_size(job: tuple[Any, ...]) -> int:
    try:
        return os.path.getsize(job[0])
    except OSError:
        return 0


def _evaluate_crashed(job: tuple[Any, ...]) -> Outcome:
    return [source_error(job[0], _CRASH)], None


def _scan_crashed(job: tuple[Any, ...]) -> FileScan:
    return FileScan(job[0], (0, 0), error=_CRASH)


def _result_key(scan: FileScan, facts: FileFacts, codes: frozenset[str]) -> str:
    stable = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in vars(facts).items()}
    text = repr((scan.path, scan.digest, sorted(stable.items()), sorted(codes)))  # no set order: it varies
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def check_paths(paths: Sequence[str | Path], settings: Settings | None = None, *, use_cache: bool = True,
                pack: Pack | None = None) -> CheckResult:
    settings = settings or Settings()
    pack = pack or load_pack(settings.rule_packs)
    codes = frozenset(settings.enabled(ALL_CODES))
    found = discover([Path(p) for p in paths], settings.exclude)
    result = CheckResult(errors=list(found.errors), files=len(found.files))

    cache_root = settings.cache_dir or settings.root / ".specguard_cache"
    cache = Cache.at(cache_root, pack.fingerprint, settings.fingerprint()) if use_cache else Cache(None)
    locator = ModuleLocator()

    # Stage one: prefilter and summarize, reusing scans whose (size, mtime) did not change.
    scans: dict[str, FileScan] = {}
    todo = []
    for path in map(str, found.files):
        cached = cache.scans.get(path)
        try:
            if cached is not None and cached.stamp == stamp_of(Path(path)):
                scans[path] = cached
                continue
        except OSError:
            pass
        todo.append((path, pack.needles, pack.needle_groups))
    for scan in run_sharded(scan_file, todo, min_jobs=_PARALLEL_MIN_FILES, on_crash=_scan_crashed):
        scans[scan.path] = scan
        if scan.stamp != (0, 0):
            cache.put_scan(scan.path, scan)

    borrowed: set[str] = set()

    def load_summary(path: Path) -> ModuleSummary | None:
        """A module without a pack name, read only because an ancestor class or the sink lives there."""
        key = str(path)
        cached = cache.scans.get(key)
        # A prefiltered-out scan has no summary; read the file in full this once.
        if cached is None or cached.summary is None or cached.stamp != stamp_of(path):
            cached = scan_file(key, pack.needles, summarize_always=True)
            cache.put_scan(key, cached)
        borrowed.add(key)
        return cached.summary

    index = ProjectIndex(locator, load_summary)
    for scan in scans.values():
        if scan.summary is not None:
            index.add(scan.summary)
            locator.add(scan.summary.module, Path(scan.path), scan.root)

    # Stage two: the files some enabled rule can match, evaluated (or taken from the cache).
    jobs, keys, live_results = [], {}, set()
    for path, scan in scans.items():
        if scan.error is not None:
            result.findings.append(source_error(path, scan.error, scan.error_line))
            continue
        if scan.summary is None or not scan.mentions:
            continue
        facts = index.facts(scan.summary, pack)
        key = _result_key(scan, facts, codes)
        live_results.add(key)
        if key in cache.results:
            result.findings.extend(cache.results[key])
        else:
            keys[path] = key
            jobs.append((path, facts, pack, codes, scan.mentions, scan.summary.definitions))
    result.parsed = len(jobs)
    # libcst's native parser runs only in workers: a fault there must not take the whole run down.
    outcomes = run_sharded(_evaluate, jobs, min_jobs=_PARALLEL_MIN_CANDIDATES, on_crash=_evaluate_crashed,
                           weight=_file_size, main_shares=False)
    for job, (findings, error) in zip(jobs, outcomes, strict=True):
        if error is not None:
            result.errors.append(error)
            continue
        cache.put_result(keys[job[0]], findings)
        result.findings.extend(findings)
    cache.save(set(scans) | borrowed, live_results)

    result.findings = sorted(f for f in result.findings if not _ignored(f, settings))
    return result


def _ignored(finding: Finding, settings: Settings) -> bool:
    if finding.code != "SG000" and finding.code not in settings.enabled(ALL_CODES):
        return True
    return is_suppressed(finding, settings)


def check_source(text: str, path: str = "example.py", module: str = "example", *,
                 pack: Pack | None = None, settings: Settings | None = None) -> list[Finding]:
    """One in-memory module through the same index and rules, with nothing else in the project.

    What the rules' own examples and the property tests run; a source error comes back as SG000.
    """
    from specguard.analysis.evaluate import evaluate_source
    from specguard.analysis.source import parse_ast
    from specguard.analysis.summary import summarize
    from specguard.errors import SourceError

    settings = settings or Settings()
    pack = pack or load_pack(settings.rule_packs)
    try:
        summary = summarize(parse_ast(text, path), module, False)
    except SourceError as exc:
        return [source_error(path, str(exc), exc.line)]
    index = ProjectIndex(ModuleLocator(), lambda _: None)
    index.add(summary)
    facts = index.facts(summary, pack)
    mentions = frozenset(n.decode() for n in pack.needles if n.decode() in text)
    codes = frozenset(settings.enabled(ALL_CODES))
    return sorted(evaluate_source(text, path, facts, pack, codes, mentions, summary.definitions))
