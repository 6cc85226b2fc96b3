"""Text edits from `ast` nodes, for fixes of the rules that read CPython's tree (the rules on the evaluator).

`ast` gives positions, not formatting, so a fix says what its new text is and these helpers say where it goes:
on the node's own span, or as whole lines before the statement that holds it, indented as that statement is.
Positions in `ast` count UTF-8 bytes; edits count characters, as findings do.
"""

from __future__ import annotations

import ast
import re

from specguard.fix_model import Edit, split_lines
from specguard.fixes.layout import Argument, Layout, flat
from specguard.program.ast_tools import source_segment

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


def line_ending(text: str, lineno: int) -> str:
    """The line ending of line `lineno` (1-based), which the lines a fix writes there take: a CRLF file stays CRLF.
    A last line without one takes the ending of the line above it."""
    lines = split_lines(text)
    for line in reversed(lines[:lineno]):
        ending = line[len(line.rstrip("\r\n")) :]
        if ending:
            return ending
    return "\n"


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
    newline = line_ending(text, statement.lineno)
    return Edit("".join(f"{indent}{new}{newline}" if new else newline for new in new_lines), at, 1, at, 1)


def around(text: str, node: ast.AST) -> tuple[str, str]:
    """The text before `node` on its first line (indentation included) and after it on its last line (without the
    line ending): where a replacement of `node` will stand."""
    lines = split_lines(text)
    first = lines[node.lineno - 1]  # type: ignore[attr-defined]
    last = lines[(node.end_lineno or node.lineno) - 1].rstrip("\r\n")  # type: ignore[attr-defined]
    prefix = first[: _column(first, node.col_offset) - 1]  # type: ignore[attr-defined]
    return prefix, last[_column(last, node.end_col_offset or 0) - 1 :]  # type: ignore[attr-defined]


def argument_of(root: ast.AST, node: ast.expr) -> ast.Call | None:
    """The call under `root` that `node` is an argument of (by position or keyword), if any."""
    for call in (n for n in ast.walk(root) if isinstance(n, ast.Call)):
        if any(a is node for a in call.args) or any(k.value is node for k in call.keywords):
            return call
    return None


def place(
    text: str,
    node: ast.expr,
    layout: Layout,
    expression: tuple[str, list[str], str, str],
    statement: ast.stmt,
    call: ast.Call | None = None,
) -> Edit | None:
    """The edit putting an expression where `node` (in `statement`) is. `expression` is (head, parts, tail, one
    line).

    Where `node` is an argument of `call` and the call's arguments share one line, the call is laid out anew as
    a formatter lays it out (joined when it now fits, split when it no longer does); otherwise the one line
    stays in place if the line then fits, else head + parts + tail is split inside its brackets where a
    formatter would split there. None where a formatter would split something else, which a fix does not
    rewrite, or where a line of the statement the edit leaves as it is was already too long: a formatter that
    kept it so had no better layout, and may find another one for the fixed statement."""
    edit = split_call(text, call, node, layout, expression) if call is not None else None
    if edit is None:
        head, parts, tail, flat_text = expression
        prefix, suffix = around(text, node)
        new = layout.in_place(prefix, suffix, flat_text, head, parts, tail)
        edit = replace_node(text, node, new.replace("\n", line_ending(text, node.lineno))) if new is not None else None
    if edit is None:
        return None
    kept = [
        n
        for n in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1)
        if not edit.line <= n <= edit.end_line
    ]
    lines = split_lines(text)
    return edit if layout.fits(*(lines[n - 1].rstrip("\r\n") for n in kept)) else None


def split_call(
    text: str, call: ast.Call, node: ast.expr, layout: Layout, expression: tuple[str, list[str], str, str]
) -> Edit | None:
    """`call`, whose arguments all sit on one line, with `node` (one of them) replaced and the arguments laid out
    as a formatter lays out a call that ends its line; None where the call holds a comment or a trailing comma,
    or something follows it on its last line (then the formatter would split that instead)."""
    source, func = source_segment(text, call), source_segment(text, call.func)
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    if source is None or func is None or not items or len({n.lineno for n in items} | {items[-1].end_lineno}) > 1:
        return None
    prefix, suffix = around(text, call)
    opening = source.index("(", len(func))
    inside = source[opening + 1 : -1]
    if suffix.split("#", 1)[0].strip() or flat(f"({inside})") is None or inside.rstrip().endswith(","):
        return None
    head, parts, tail, flat_text = expression
    arguments = []
    for item in items:
        written = source_segment(text, item)
        value = item.value if isinstance(item, ast.keyword) else item
        if written is None:
            return None
        if value is not node:
            arguments.append(Argument(written))
            continue
        keyword = f"{item.arg}=" if isinstance(item, ast.keyword) else ""
        arguments.append(Argument(keyword + flat_text, (keyword + head, parts, tail)))
    indent = prefix[: len(prefix) - len(prefix.lstrip())]
    lines = layout.call(indent, prefix[len(indent) :] + source[: opening + 1], arguments, ")" + suffix)
    if lines is None:
        return None
    newline = line_ending(text, call.lineno)
    last = split_lines(text)[(call.end_lineno or call.lineno) - 1].rstrip("\r\n")
    return Edit(
        newline.join(lines)[len(indent) :], call.lineno, len(indent) + 1, call.end_lineno or call.lineno, len(last) + 1
    )
