"""Text edits on a module's top-level imports, for fixes that need a name or stop needing one.

The rules see only the definitions of a module (program/sparse.py), so the imports are edited on the original
text, found with CPython's parser; one statement is rewritten with libcst so its commas and brackets stay right.
"""

from __future__ import annotations

import ast
import functools
import re

from specguard.fix_model import Edit, split_lines
from specguard.program.ast_tools import source_segment


def _column(line: str, byte_offset: int) -> int:
    """ast's UTF-8 byte offset on a line as edits count columns: characters, 1-based."""
    return len(line.encode()[:byte_offset].decode(errors="replace")) + 1


@functools.lru_cache(maxsize=4)
def _top_level_imports(source: str) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The module's top-level imports, parsed once for all the fixes of a file (a parse a fix was quadratic)."""
    tree = ast.parse(source)
    return tuple(s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)))


@functools.lru_cache(maxsize=16)
def _mentions(source: str, name: str) -> int:
    return len(re.findall(rf"\b{re.escape(name)}\b", source))


@functools.lru_cache(maxsize=4)  # the same import for every fix of a file: parsed once
def add_import(source: str, module: str, name: str) -> Edit:
    """`from module import name` on a new line after the last top-level import (after a module docstring, or
    first, in a module without imports), with the blank lines a formatter keeps around imports: one after a
    docstring, and, where no import was there before, one before the next statement (two before a definition)."""
    tree = ast.parse(source)
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    head = tree.body[0] if tree.body else None
    docstring = head if isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant) else None
    after = imports[-1] if imports else docstring
    line = (after.end_lineno or after.lineno) + 1 if after is not None else 1
    newline = "\r\n" if "\r\n" in source[:1000] else "\n"
    statement = f"from {module} import {name}"
    lines = split_lines(source)
    if line > len(lines) and lines and not lines[-1].endswith("\n"):  # no newline after the last import
        end = len(lines[-1]) + 1
        return Edit(newline + statement, len(lines), end, len(lines), end)
    if imports:
        return Edit(statement + newline, line, 1, line, 1)
    following = next((s for s in tree.body if s.lineno >= line), None)
    blank = 0
    while line - 1 + blank < len(lines) and not lines[line - 1 + blank].strip():
        blank += 1
    wanted = 0 if following is None else 2 if isinstance(following, (*_DEFINITIONS, ast.ClassDef)) else 1
    before = newline if docstring is not None else ""
    return Edit(before + statement + newline + newline * max(0, wanted - blank), line, 1, line, 1)


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def drop_import(source: str, name: str, deleted: str) -> Edit | None:
    """Remove `name` from the top-level `from ... import` that binds it, when the module mentions it (as a word,
    comments and strings included) only there and in `deleted`, the code the same fix deletes."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    if _mentions(source, name) != 1 + len(word.findall(deleted)):
        return None
    lines = split_lines(source)
    for stmt in _top_level_imports(source):
        if not isinstance(stmt, ast.ImportFrom) or not any((a.asname or a.name) == name for a in stmt.names):
            continue
        first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
        start = _column(lines[first - 1], stmt.col_offset)
        end = _column(lines[last - 1], stmt.end_col_offset or 0)
        rest = lines[last - 1][end - 1 :].strip()
        whole_lines = start == 1 and (rest == "" or rest.startswith("#"))  # a comment goes with its import
        if len(stmt.names) == 1:
            return Edit("", first, 1, last + 1, 1) if whole_lines else None
        import libcst as cst  # only where a fix is built: importing the rules needs no libcst

        node = cst.parse_statement(source_segment(source, stmt) or "")
        assert isinstance(node, cst.SimpleStatementLine) and isinstance(node.body[0], cst.ImportFrom)
        names = node.body[0].names
        assert not isinstance(names, cst.ImportStar)
        kept = [a for a in names if (a.evaluated_alias or a.evaluated_name) != name]
        kept[-1] = kept[-1].with_changes(comma=names[-1].comma)
        rewritten = cst.Module([]).code_for_node(node.body[0].with_changes(names=kept))
        return Edit(rewritten, first, start, last, end)
    return None
