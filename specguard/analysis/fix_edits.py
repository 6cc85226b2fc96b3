"""A rule's fix, written as a libcst transformation, turned into text edits on the original source.

Rules fix what they flag by replacing or removing nodes of the tree they were given. Regenerating the whole file
from libcst would be exact too, but the rules see the sparse source (analysis/sparse.py) and only text edits keep
everything outside the change byte for byte. So each top-level definition the transformation touched is rendered
before and after (libcst keeps every comment, blank line and bracket of what it did not change) and the two are
diffed; each differing run of lines, trimmed of what both sides share, becomes one edit.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from specguard.analysis.fix_model import Edit, Fix, split_lines

if TYPE_CHECKING:
    from specguard.rules.base import NodeFix

Change = tuple[cst.CSTNode, "cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]"]


class _Replace(cst.CSTTransformer):
    def __init__(self, changes: Sequence[Change]) -> None:
        super().__init__()
        self._by_id = {id(old): new for old, new in changes}

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def, override]
        return self._by_id.get(id(original_node), updated_node)


def _bare(stmt: cst.CSTNode) -> cst.CSTNode:
    """A top-level statement without the blank lines and comments above it, which the sparse source may blank."""
    return stmt.with_changes(leading_lines=()) if hasattr(stmt, "leading_lines") else stmt


def _position(code: str, offset: int, first_line: int) -> tuple[int, int]:
    line = first_line + code.count("\n", 0, offset)
    return line, offset - (code.rfind("\n", 0, offset) + 1) + 1


def _diff(old: str, new: str, first_line: int) -> Iterator[Edit]:
    old_lines, new_lines = split_lines(old), split_lines(new)
    starts = [0]
    for line in old_lines:
        starts.append(starts[-1] + len(line))
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before, after = old[starts[i1] : starts[i2]], "".join(new_lines[j1:j2])
        common = min(len(before), len(after))
        head = 0
        while head < common and before[head] == after[head]:
            head += 1
        tail = 0
        while tail < common - head and before[-1 - tail] == after[-1 - tail]:
            tail += 1
        start, end = starts[i1] + head, starts[i2] - tail
        content = after[head : len(after) - tail]
        yield Edit(content, *_position(old, start, first_line), *_position(old, end, first_line))


def text_edits(module: cst.Module, changes: Sequence[Change]) -> tuple[Edit, ...]:
    """The edits that turn `module`'s text into that of `module` with `changes` applied.

    Raises ValueError when a change adds, removes or reorders top-level statements (the sparse source has no
    text for what lies between them); rules change what is inside a definition and add imports as raw edits.
    """
    changed = module.visit(_Replace(changes))
    if not isinstance(changed, cst.Module) or len(changed.body) != len(module.body):
        raise ValueError("a fix may not add or remove top-level statements")
    line = 1 + len(module.header)  # one line each
    edits: list[Edit] = []
    for old, new in zip(module.body, changed.body, strict=True):
        old_code = module.code_for_node(old)
        lead = len(getattr(old, "leading_lines", ()))
        if getattr(new, "leading_lines", None) != getattr(old, "leading_lines", None):
            raise ValueError("a fix may not change the lines above a top-level definition")
        old_bare, new_bare = module.code_for_node(_bare(old)), changed.code_for_node(_bare(new))
        if old_bare != new_bare:
            edits.extend(_diff(old_bare, new_bare, line + lead))
        line += old_code.count("\n")
    return tuple(edits)


def checked_fix(module: cst.Module, fix: NodeFix, original: str, parsed: str) -> Fix | None:
    """The rule's fix as text edits on `original`, or None where it cannot be one.

    `parsed` is the text `module` was parsed from (the sparse source): an edit may touch only lines it shares with
    the original, which a transformation inside a definition always does; anything else is a bug of the rule,
    and the finding is better reported without a fix than with a wrong one.
    """
    try:
        edits = text_edits(module, fix.changes)
    except ValueError:
        return None
    original_lines, parsed_lines = split_lines(original), split_lines(parsed)
    for edit in edits:
        last = edit.end_line - (1 if edit.end_col == 1 and edit.end_line > edit.line else 0)
        for number in range(edit.line, last + 1):
            if number > len(parsed_lines) or original_lines[number - 1] != parsed_lines[number - 1]:
                return None
    if not edits and not fix.edits:
        return None
    return Fix(fix.applicability, fix.message, tuple(sorted([*edits, *fix.edits], key=lambda e: (e.start, e.end))))
