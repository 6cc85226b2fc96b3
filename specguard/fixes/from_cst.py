"""A rule's fix, written as a libcst transformation, turned into text edits on the original source.

Rules fix what they flag by replacing or removing nodes of the tree they were given. Regenerating the whole file
from libcst would be exact too, but the rules see the sparse source (program/sparse.py) and only text edits keep
everything outside the change byte for byte. So each top-level definition the transformation touched is rendered
before and after (libcst keeps every comment, blank line and bracket of what it did not change) and the two are
diffed; each differing run of lines, trimmed of what both sides share, becomes one edit.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Sequence
from typing import Any

import libcst as cst

from specguard.fix_model import Change, Edit, Fix, NodeFix, fix_of, split_lines
from specguard.lines import after_line_end, line_at, position
from specguard.program.cst_tools import kids


def _on_paths(node: cst.CSTNode, targets: set[int], found: set[int]) -> bool:
    """Collect in `found` the ids of `node` and its descendants that hold a target; whether `node` does."""
    holds = id(node) in targets
    for kid in kids(node):
        holds = _on_paths(kid, targets, found) or holds
    if holds:
        found.add(id(node))
    return holds


def _rebuilt(node: cst.CSTNode, new: dict[int, Any], on_paths: set[int]) -> Any:
    """`node` with the changes made, rebuilding only the nodes on the way to them (libcst's transformer
    revisits, and revalidates, every node of the definition, ten times the cost)."""
    if id(node) in new:
        return new[id(node)]
    updates: dict[str, Any] = {}
    for name in (f.name for f in dataclasses.fields(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode) and id(value) in on_paths:
            updates[name] = _rebuilt(value, new, on_paths)
        elif isinstance(value, (list, tuple)) and any(id(v) in on_paths for v in value):
            items: list[Any] = []
            for item in value:
                done = _rebuilt(item, new, on_paths) if id(item) in on_paths else item
                if isinstance(done, cst.FlattenSentinel):
                    items.extend(done.nodes)
                elif not isinstance(done, cst.RemovalSentinel):
                    items.append(done)
            updates[name] = type(value)(items)
    return node.with_changes(**updates)


def _bare(stmt: cst.CSTNode) -> cst.CSTNode:
    """A top-level statement without the blank lines and comments above it, which the sparse source may blank."""
    return stmt.with_changes(leading_lines=()) if hasattr(stmt, "leading_lines") else stmt


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
        yield Edit(content, *position(old, start, first_line), *position(old, end, first_line))


def text_edits(
    module: cst.Module | None,
    changes: Sequence[Change],
    parsed: str,
    holders: dict[int, cst.BaseStatement] | None = None,
) -> tuple[Edit, ...]:
    """The edits that turn `parsed` (the text `module` was parsed from) into `module` with `changes` applied.

    Only the top-level definitions holding a change are rendered, before and after, and found in `parsed` by
    their text, so the cost is that of the definitions a fix touches, not of the file. Raises ValueError when a
    change would add or remove a top-level statement or the lines above one (the sparse source has no text for
    what lies between them); rules change what is inside a definition and add imports as raw edits. `holders`: the
    module's `top_statements` (then only the definitions holding a change are walked, not every one).
    """
    if not changes:  # text edits only (a rule on `ast`): nothing to render
        return ()
    targets, on_paths = {id(old): new for old, new in changes}, set()
    edits: list[Edit] = []
    # libcst renders the last statement with the newline the file lacks
    rendered = parsed if module.has_trailing_newline else parsed + module.default_newline
    touched = None if holders is None else {id(holders[id(old)]) for old, _ in changes if id(old) in holders}
    walked = (stmt for stmt in module.body if touched is None or id(stmt) in touched)
    for old in (stmt for stmt in walked if _on_paths(stmt, set(targets), on_paths)):
        new = _rebuilt(old, targets, on_paths)
        if not isinstance(new, cst.CSTNode) or getattr(new, "leading_lines", None) != getattr(
            old, "leading_lines", None
        ):
            raise ValueError("a fix may not add or remove top-level statements or the lines above them")
        old_code, new_code = module.code_for_node(_bare(old)), module.code_for_node(_bare(new))
        at = rendered.find(old_code)
        if at < 0 or rendered.find(old_code, at + 1) >= 0 or not after_line_end(rendered, at):
            raise ValueError("the definition is not where the parsed text has it once")
        edits.extend(_diff(old_code, new_code, line_at(parsed, at)))
    return tuple(edits)


def checked_fix(
    module: cst.Module | None,
    fix: NodeFix,
    original: str,
    parsed: str,
    holders: dict[int, cst.BaseStatement] | None = None,
) -> Fix | None:
    """The rule's fix as text edits on `original`, or None where it cannot be one.

    `parsed` is the text `module` was parsed from (the sparse source): an edit may touch only lines it shares with
    the original, which a transformation inside a definition always does; anything else is a bug of the rule,
    and the finding is better reported without a fix than with a wrong one.
    """
    try:
        edits = text_edits(module, fix.changes, parsed, holders)
    except ValueError:
        return None
    original_lines, parsed_lines = split_lines(original), split_lines(parsed)
    for edit in edits:
        last = edit.end_line - (1 if edit.end_col == 1 and edit.end_line > edit.line else 0)
        for number in range(edit.line, last + 1):
            if number > len(parsed_lines) or original_lines[number - 1] != parsed_lines[number - 1]:
                return None
    return fix_of(fix.applicability, fix.message, [*edits, *fix.edits])
