"""Text edits from `ast` nodes, for fixes of the rules that read CPython's tree (the dataflow layer's).

`ast` gives positions, not formatting, so a fix says what its new text is and these helpers say where it goes:
on the node's own span, or as whole lines before the statement that holds it, indented as that statement is.
Positions in `ast` count UTF-8 bytes; edits count characters, as findings do.
"""

from __future__ import annotations

import ast
import re

from specguard.fixes.model import Edit, split_lines

_SCOPES = (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")
_INDENT = re.compile(r"[ \t]*")


def _column(line: str, byte: int) -> int:
    return len(line.encode()[:byte].decode(errors="replace")) + 1


def replace_node(text: str, node: ast.AST, content: str) -> Edit:
    """Replace the text of `node` (an expression or statement with positions) by `content`."""
    lines = split_lines(text)
    first, last = node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]
    start = _column(lines[first - 1], node.col_offset)  # type: ignore[attr-defined]
    end = _column(lines[last - 1], node.end_col_offset or 0)  # type: ignore[attr-defined]
    return Edit(content, first, start, last, end)


def _path(node: ast.AST, target: ast.AST) -> list[ast.AST] | None:
    if node is target:
        return [node]
    for child in ast.iter_child_nodes(node):
        if (rest := _path(child, target)) is not None:
            return [node, *rest]
    return None


def enclosing_statement(function: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.AST) -> ast.stmt | None:
    """The innermost statement of `function`'s blocks that holds `node`, when lines inserted before it see the
    names `node` sees: None when a lambda, a comprehension or a nested definition lies between them."""
    path = _path(function, node)
    if path is None:
        return None
    found = None
    for i in range(1, len(path)):
        parent, child = path[i - 1], path[i]
        in_block = any(isinstance(b := getattr(parent, block, None), list) and child in b for block in _BLOCKS)
        if isinstance(child, ast.stmt) and in_block:
            found = i
    if found is None or any(isinstance(n, _SCOPES) for n in path[found + 1 : -1]):
        return None
    return path[found]  # type: ignore[return-value]


def indent_unit(text: str, function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """One level of indentation as the function's body uses it (four spaces when it cannot tell)."""
    lines = split_lines(text)
    outer = _INDENT.match(lines[function.lineno - 1]).group()  # type: ignore[union-attr]
    inner = _INDENT.match(lines[function.body[0].lineno - 1]).group()  # type: ignore[union-attr]
    return inner[len(outer) :] if inner.startswith(outer) and len(inner) > len(outer) else "    "


def insert_before(text: str, statement: ast.stmt, new_lines: list[str]) -> Edit | None:
    """`new_lines` as whole lines before `statement` (and above the comment lines directly over it, which belong
    to it), each indented as the statement is. None when the statement does not start its line."""
    lines = split_lines(text)
    line = lines[statement.lineno - 1]
    indent = _INDENT.match(line).group()  # type: ignore[union-attr]
    if len(indent.encode()) != statement.col_offset:
        return None  # `a = 1; b = any(...)`: no line of its own to insert before
    at = statement.lineno
    while at > 1 and lines[at - 2].strip().startswith("#") and lines[at - 2].startswith(indent):
        at -= 1
    newline = line[len(line.rstrip("\r\n")) :] or "\n"
    return Edit("".join(f"{indent}{new}{newline}" if new else newline for new in new_lines), at, 1, at, 1)


def set_of_iterable(text: str, call: ast.Call) -> str | None:
    """A set of what a one-argument reduction (`any(s.flag for s in specs)`, `max(flags)`) reduces: the same
    comprehension in braces, or `set(<argument>)`. None for any other call shape."""
    if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        return None
    source = ast.get_source_segment(text, call)
    if source is None:
        return None
    import libcst as cst  # only where a fix is built: importing the rules needs no libcst

    try:
        parsed = cst.parse_expression(source)
    except cst.ParserSyntaxError:
        return None
    assert isinstance(parsed, cst.Call)
    spread = parsed.args[0].value
    if isinstance(spread, (cst.GeneratorExp, cst.ListComp, cst.SetComp)):
        return cst.Module([]).code_for_node(cst.SetComp(spread.elt, spread.for_in))
    return f"set({cst.Module([]).code_for_node(spread)})"
