"""`--fix` and `--diff`: the findings' fixes applied to the text of their files, each checked before it is kept.

Per file, as ruff does: apply every fix whose edits do not overlap another's, re-parse the result and re-run the
rules on it, and keep the round only if it parses and no fixed finding is still reported; a round that fails is
retried one fix at a time and the culprit refused. Fixes that overlapped one applied in this round wait for the
next round, which starts from the re-check's findings (bounded, as ruff bounds its iterations). Only then is the
file written: in place (`_files.rewrite_in_place`: links, mode and attributes kept; the old content put back if the
write fails) and only if nobody changed it meanwhile. A file with SG000 is never touched, nor one whose real path
lies outside the paths given (a symlink out of the tree), nor a read-only one. Each file is read and written beneath
a handle held on the path given that holds it (`_files.open_beneath`), so a folder swapped for a link after the
check cannot send the write out of the tree.
"""

from __future__ import annotations

import difflib
import io
import os
import re
import tokenize
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from specguard._files import (
    FOLDER,
    SOURCE_CAP,
    OutsideTree,
    UnreadableFile,
    UnwritableFile,
    held_real_path,
    is_held,
    open_beneath,
    open_folder,
    read_regular_stat,
    rewrite_in_place,
)
from specguard.findings import Finding
from specguard.fix_model import Fix, apply_edits, split_lines

# How many re-check rounds one file gets; ruff stops at 100, but specguard's fixes rarely overlap at all.
MAX_ROUNDS = 10

Key = tuple[str, str | None, str]  # what identifies a finding across edits that move it: code, scope, message
_LINE_REFERENCE = re.compile(r"\(line \d+\)")  # messages name the lines a value passed through; edits move them


def key(finding: Finding) -> Key:
    return finding.code, finding.symbol, _LINE_REFERENCE.sub("(line)", finding.message)


@dataclass(frozen=True)
class FixPolicy:
    """Which fixes `--fix` may apply: safe ones, unsafe ones too with `--unsafe-fixes`, of the fixable codes."""

    unsafe_fixes: bool | None = None
    fixable: Callable[[str], bool] = lambda code: True

    def offered(self, finding: Finding) -> Fix | None:
        """The fix a report shows for a finding: none for an unfixable code, as in ruff."""
        return finding.fix if finding.fix is not None and self.fixable(finding.code) else None

    def applies(self, finding: Finding) -> bool:
        fix = self.offered(finding)
        return fix is not None and fix.applies(self.unsafe_fixes)


@dataclass
class FixedText:
    text: str
    applied: list[Finding] = field(default_factory=list)  # as each was found before its fix
    refused: list[str] = field(default_factory=list)  # one line per fix that was not kept, saying why


def fix_text(
    text: str,
    findings: Sequence[Finding],
    recheck: Callable[[str], list[Finding]],
    applies: Callable[[Finding], bool],
    chosen: Sequence[Finding] | None = None,
) -> FixedText:
    """Apply the fixes of `findings` (the findings of `text`) that `applies` accepts.

    `chosen` limits them to some findings (the reported ones, not the suppressed): in the first round by
    position, later, after edits moved them, by code, scope and message, as many times as chosen.
    """
    chosen = findings if chosen is None else chosen
    first, budget = {_place(f) for f in chosen}, Counter(map(key, chosen))
    result, current, refused = FixedText(text), list(findings), set()
    for round_ in range(MAX_ROUNDS):
        candidates = [
            f
            for f in current
            if f.fix is not None
            and budget[key(f)] > 0
            and key(f) not in refused
            and (round_ > 0 or _place(f) in first)
            and applies(f)
        ]
        batch: list[Finding] = []
        for finding in sorted(candidates, key=lambda f: f.fix.edits[0].start):  # type: ignore[union-attr]
            if not finding.fix.overlaps([b.fix for b in batch]):  # type: ignore[union-attr, misc]
                batch.append(finding)
        if not batch:
            break
        attempt = _attempt(result.text, batch, current, recheck)
        if attempt is None:  # find the fix that broke the round; the others are tried again next round
            for finding in batch:
                attempt = _attempt(result.text, [finding], current, recheck)
                if attempt is not None:
                    batch = [finding]
                    break
                refused.add(key(finding))
                result.refused.append(_refusal(finding, recheck, result.text))
            if attempt is None:
                continue
        result.text, current = attempt
        result.applied.extend(batch)
        budget.subtract(map(key, batch))
    return result


def _place(finding: Finding) -> tuple[int, int, str, str]:
    return finding.line, finding.col, finding.code, finding.message


def _attempt(
    text: str, batch: list[Finding], before: list[Finding], recheck: Callable[[str], list[Finding]]
) -> tuple[str, list[Finding]] | None:
    """The fixed text and its findings, or None when it does not parse or still reports a fixed finding."""
    fixed = apply_edits(text, [e for f in batch for e in f.fix.edits])  # type: ignore[union-attr]
    after = recheck(fixed)
    if any(f.code == "SG000" for f in after) or (compiles(text) and not compiles(fixed)):
        return None
    remaining, had, fixing = Counter(map(key, after)), Counter(map(key, before)), Counter(map(key, batch))
    if any(remaining[k] > had[k] - n for k, n in fixing.items()):
        return None
    return fixed, after


def compiles(text: str) -> bool:
    """Whether CPython's compiler accepts the text; it runs nothing (the code object is dropped). It catches what
    the parser lets through (`*a` alone, `return` outside a function), which a fix must not introduce."""
    try:
        compile(text, "<fixed>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _refusal(finding: Finding, recheck: Callable[[str], list[Finding]], text: str) -> str:
    after = recheck(apply_edits(text, finding.fix.edits))  # type: ignore[union-attr]
    errors = [f for f in after if f.code == "SG000"]
    if errors:
        why = f"the result does not parse ({errors[0].message})"
    elif compiles(text) and not compiles(apply_edits(text, finding.fix.edits)):  # type: ignore[union-attr]
        why = "the result does not compile"
    else:
        why = "the rules still report it on the result"
    return f"{finding.path}:{finding.line}:{finding.col}: {finding.code} fix not applied: {why}"


# ---- files -------------------------------------------------------------------------------------------------


class Project(Protocol):
    """What the fixer needs from the run that produced the findings (analysis/engine.py's run)."""

    def source(self, path: str) -> bytes | None: ...

    def recheck(self, path: str, text: str) -> list[Finding]: ...


@dataclass
class FixReport:
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (text before, text after)
    applied: list[Finding] = field(default_factory=list)  # findings whose fix was applied, as found before it
    notes: list[str] = field(default_factory=list)  # one line per file or fix left as it was, saying why

    @property
    def fixed(self) -> int:
        return len(self.applied)


@dataclass(frozen=True)
class _Tree:
    """A path that was checked, held open: a folder, or the folder of a file given by name (then only that file)."""

    real: str
    fd: int
    only: str | None = None

    def relative(self, real: str) -> str | None:
        """Where the file whose real path is `real` lies beneath the held folder; None when it lies elsewhere."""
        if self.only is not None:
            return self.only if real == os.path.join(self.real, self.only) else None
        prefix = self.real.rstrip(os.sep) + os.sep
        return real[len(prefix) :] if real.startswith(prefix) else None


def _hold(path: str | Path, notes: list[str] | None = None) -> _Tree | None:
    """The checked path's real folder: the one the run held from its start (`_files.holding`), else opened from
    `/` along its real path without following a link (a link there now is a swap since it was resolved), so the
    handle is on the folder the check named. A held folder whose name now leads elsewhere is refused (noted)."""
    real, same = held_real_path(path)
    if not same:
        if notes is not None:
            notes.append(f"{path}: not fixed: it is no longer the folder that was checked (swapped since); left alone")
        return None
    folder, only = (real, None) if os.path.isdir(real) else os.path.split(real)
    try:
        if is_held(folder):
            fd = open_folder(folder)
        else:
            top = open_folder("/")
            try:
                fd = open_beneath(top, folder.lstrip("/") or ".", FOLDER, follow=False)
            finally:
                os.close(top)
    except OSError:
        return None
    return _Tree(folder, fd, only)


def fix_files(
    project: Project, findings: Sequence[Finding], policy: FixPolicy, *, write: bool, inside: Sequence[Path] = ()
) -> FixReport:
    """Fix the files of the reported `findings` (suppressed and baselined ones are not reported, so not fixed).

    `inside` are the paths that were checked: as ruff does, only a file whose real path lies under the real path of
    one of them is fixed (or shown in a diff); a symlink that leads out of the tree is named and left alone. Each
    file is then read and written beneath the checked path that holds it, never through a link leading out of it
    (a folder swapped for one since the check: named, and left as it is).
    """
    report = FixReport()
    broken = {f.path for f in findings if f.code == "SG000"}
    by_path: dict[str, list[Finding]] = {}
    for finding in findings:
        if policy.applies(finding):
            by_path.setdefault(finding.path, []).append(finding)
    # said of a file that is there to fix (a path that does not exist or is a FIFO has no fix to lose)
    report.notes.extend(
        f"{path}: not fixed: it has a source error (SG000)" for path in sorted(broken) if os.path.isfile(path)
    )
    by_path = {path: chosen for path, chosen in by_path.items() if path not in broken}

    def fix(path: str, text: str) -> FixedText:
        return fix_source(project, path, text, by_path[path], policy)

    return edit_files(project, sorted(by_path), fix, report, write=write, inside=inside)


Edit = Callable[[str, str], FixedText]  # a file's path and checked text -> the text to write, with what it did


def edit_files(
    project: Project,
    paths: Sequence[str],
    edit: Edit,
    report: FixReport,
    *,
    write: bool,
    inside: Sequence[Path] = (),
    undone: str = "not fixed",
) -> FixReport:
    """`edit` each of `paths` (checked files) where it lies under `inside`, and write the result where `write`
    (see `fix_files`); a file left as it was is named in `report.notes`, after `undone`."""
    trees = [tree for tree in (_hold(path, report.notes) for path in inside) if tree is not None]
    try:
        for path in paths:
            real = os.path.realpath(path)
            place = _place_of(real, trees)
            if place is None and not inside and (own := _hold(real)) is not None:
                trees.append(own)  # no paths given: the file's own folder
                place = own, own.only or ""
            if place is None:
                report.notes.append(f"{path}: {undone}: its real path {real} lies outside the paths checked")
                continue
            try:
                _edit_file(project, path, place, edit, report, write, undone)
            except OutsideTree as exc:
                report.notes.append(f"{path}: {undone}: {exc.how} leads outside the paths checked; left as it is")
            except OSError as exc:
                report.notes.append(f"{path}: {undone}: cannot read or write it: {exc.strerror or exc}")
            except Exception as exc:  # noqa: BLE001 - a bug of ours in one file must not stop the other files' fixes
                report.notes.append(f"{path}: {undone}: internal error: {type(exc).__name__}: {exc} (please report it)")
    finally:
        for tree in trees:
            os.close(tree.fd)
    return report


def _place_of(real: str, trees: list[_Tree]) -> tuple[_Tree, str] | None:
    """The held tree a file lies in, and its path beneath it."""
    for tree in trees:
        relative = tree.relative(real)
        if relative is not None:
            return tree, relative
    return None


def _edit_file(
    project: Project, path: str, place: tuple[_Tree, str], edit: Edit, report: FixReport, write: bool, undone: str
) -> None:
    tree, relative = place
    data = project.source(path)  # the bytes the findings came from
    try:
        now = read_regular_stat(relative, SOURCE_CAP, follow=False, dir_fd=tree.fd)[0]
    except UnreadableFile as exc:
        report.notes.append(f"{path}: {undone}: {exc.reason}")
        return
    if data is None or now != data:
        report.notes.append(f"{path}: {undone}: it changed after it was checked; run specguard again")
        return
    encoding = encoding_of(data)
    text = data.decode(encoding)
    edited = edit(path, text)
    report.notes.extend(edited.refused)
    if edited.text == text:
        return
    if write:
        try:
            new_data = edited.text.encode(encoding)
        except UnicodeEncodeError:
            report.notes.append(f"{path}: {undone}: the new text cannot be written in its encoding ({encoding})")
            return
        try:
            # the real path, beneath the checked path held open: a symlink inside the tree keeps its link
            rewrite_in_place(relative, data, new_data, root_fd=tree.fd)
        except UnwritableFile as exc:
            report.notes.append(f"{path}: {undone}: {exc.reason}")
            return
    report.changed[path] = (text, edited.text)
    report.applied.extend(edited.applied)


def fix_source(project: Project, path: str, text: str, chosen: Sequence[Finding], policy: FixPolicy) -> FixedText:
    """`text`, the checked content of `path`, with the fixes of `chosen` that `policy` applies, each proven by
    checking the fixed text again against the same project (a file's fix, or standard input's)."""

    def recheck(new_text: str) -> list[Finding]:
        return project.recheck(path, new_text)

    return fix_text(text, recheck(text), recheck, policy.applies, chosen)


def encoding_of(data: bytes) -> str:
    """The encoding the file was read in (program/reading.py's `decode`), to write it back the same way."""
    if data.startswith(b"\xef\xbb\xbf") or b"coding" in data[:400]:
        return tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    return "utf-8"


def unified_diff(path: str, before: str, after: str) -> str:
    """The change as `--diff` prints it (ruff's layout: the same name on both header lines)."""
    lines = difflib.unified_diff(split_lines(before), split_lines(after), fromfile=path, tofile=path)
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
