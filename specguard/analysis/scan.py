"""Stage one, per file: read it, apply the prefilter, and summarize the files that mention a pack name."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from specguard.analysis.summary import ModuleSummary, nested_class_lines, summarize
from specguard.errors import SourceError
from specguard.program.modules import module_name
from specguard.program.reading import UNSTAMPED, TooLarge, decode, name_bytes, parse_ast, read_stamped


@dataclass(frozen=True)
class FileScan:
    path: str
    stamp: tuple[int, int]  # (size, mtime_ns): an unchanged stamp reuses this scan from the cache; see UNSTAMPED
    mentions: frozenset[str] = frozenset()
    digest: str = ""
    summary: ModuleSummary | None = None
    # the first name of `x.y.NAME(` calls of a pack name: `x` must then be a module for the call to be that name
    call_owners: frozenset[str] = frozenset()
    root: Path = Path()  # the folder holding the top package, where sibling modules are looked up
    error: str | None = None
    error_line: int = 1
    not_judged: str | None = None  # why the file is not judged at all (over the per-file budget): a note, no finding


def stamp_of(path: str | Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def scan_file(
    path: str, needles: tuple[bytes, ...], groups: tuple[tuple[bytes, ...], ...] = (), summarize_always: bool = False
) -> tuple[FileScan, bytes | None]:
    """Stage one for a file: its scan, and the bytes it was made from where a later stage needs them (the files
    with a summary), so that every stage of the run sees the same bytes. `summarize_always` is for modules the
    index reads for an ancestor class."""
    try:
        data, stamp = read_stamped(path)
    except SourceError as exc:
        return FileScan(path, UNSTAMPED, error=str(exc)), None
    scan = scan_bytes(path, data, stamp, needles, groups, summarize_always)
    return scan, (data if scan.summary is not None else None)


def scan_bytes(
    path: str,
    data: bytes,
    stamp: tuple[int, int],
    needles: tuple[bytes, ...],
    groups: tuple[tuple[bytes, ...], ...] = (),
    summarize_always: bool = False,
) -> FileScan:
    try:
        text = decode(data)  # also for files no rule can match: undecodable text could hide a name
    except SourceError as exc:
        return FileScan(path, UNSTAMPED, error=str(exc))
    # The prefilter (see Pack.needle_groups); which names a file mentions is listed only for files that pass it.
    names = name_bytes(text, data)
    if not any(all(n in names for n in group) for group in groups or [(n,) for n in needles]):
        mentions: frozenset[str] = frozenset()
    else:
        mentions = frozenset(n.decode() for n in needles if n in names)
    if not mentions and not summarize_always:
        return FileScan(path, stamp)
    digest = digest_of(data)
    try:
        tree = parse_ast(text, path)
    except TooLarge as exc:
        return FileScan(path, stamp, mentions, digest, not_judged=str(exc))
    except SourceError as exc:
        return FileScan(path, stamp, mentions, digest, error=str(exc), error_line=exc.line)
    module, is_package, root = module_name(Path(path))
    owners = call_owners(names, needles) if mentions else frozenset()
    summary = summarize(tree, module, is_package, nested_class_lines(data), signed(needles))
    return FileScan(path, stamp, mentions, digest, summary, owners, root=root)


def signed(needles: tuple[bytes, ...]) -> frozenset[str]:
    """The methods whose signatures a summary keeps: those named as something a rule matches (a shared helper)."""
    return frozenset(n.decode() for n in needles)


def digest_of(data: bytes) -> str:
    """What identifies a file's content in the cache, and what a cached scan's file is checked against."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def call_owners(data: bytes, needles: tuple[bytes, ...]) -> frozenset[str]:
    owners = set()
    for match in re.finditer(rb"\.(?:" + b"|".join(map(re.escape, needles)) + rb")\s*\(", data):
        start = end = match.start()
        while start > 0 and (data[start - 1 : start].isalnum() or data[start - 1] in b"_."):
            start -= 1
        owners.add(data[start:end].partition(b".")[0].decode())
    return frozenset(owners)
