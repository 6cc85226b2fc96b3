"""Per-module summary for the project index: imports, classes and their bases, module-level functions.

Built with CPython's `ast` (a C parser, ~10x faster than libcst) because the index needs only names; rules
that need the full tree run on libcst, and only on the files the index says can match.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass, field

from specguard.lines import NEWLINE_BYTES
from specguard.program.ast_tools import absolute_module, is_bound_method
from specguard.program.ast_tools import same_scope as _same_scope
from specguard.program.signatures import Signature, signature


@dataclass(frozen=True)
class ClassSummary:
    bases: tuple[str, ...]  # dotted base expressions as written, resolved later through the imports
    methods: frozenset[str]
    line: int
    end_line: int = 0
    # the parameters of the methods named as something a rule matches (a shared helper): what an override of one
    # is compared with
    signatures: dict[str, Signature] = field(default_factory=dict)


@dataclass
class ModuleSummary:
    module: str
    is_package: bool
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    classes: dict[str, ClassSummary] = field(default_factory=dict)  # by __qualname__, nested classes too
    functions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> parameter names
    star_imports: list[str] = field(default_factory=list)  # modules imported with `from m import *`
    # (first line, last line) of each top-level statement that is or holds a class or function, decorators
    # included: the only statements rules look into, so the others need not be parsed with libcst (sparse.py)
    definitions: list[tuple[int, int]] = field(default_factory=list)

    def resolve(self, dotted: str) -> str:
        """Qualified name of a dotted reference as seen from this module."""
        head, _, rest = dotted.partition(".")
        if head in self.imports:
            target = self.imports[head]
        elif head in self.classes or head in self.functions:
            target = f"{self.module}.{head}" if self.module else head
        else:
            return dotted
        return f"{target}.{rest}" if rest else target


def dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):  # Generic[T] -> Generic
        return dotted_name(node.value)
    return None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return tuple(names)


_DEFINITION = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def nested_class_lines(source: bytes) -> list[int]:
    """Lines where an indented `class` statement may start: where `_classes` has to look inside statements."""
    lines, line, offset = [], 1, 0
    for match in re.finditer(rb"(?:^|(?<=\r))[ \t]+class\b", source, re.MULTILINE):  # a lone CR ends a line too
        line += len(NEWLINE_BYTES.findall(source, offset, match.start()))
        offset = match.start()
        lines.append(line)
    return lines


def _classes(
    body: list[ast.stmt], prefix: str, summary: ModuleSummary, nested: list[int] | None, signed: frozenset[str]
) -> None:
    """Every class at any depth, keyed by its `__qualname__` (`Outer.Inner`, `make.<locals>.Drafter`).

    `nested` (sorted lines of indented `class` keywords, or None for all) skips the bodies that hold none;
    `signed`: the method names whose signatures are kept.
    """
    for stmt in _same_scope(body):
        if not isinstance(stmt, _DEFINITION):
            continue
        if isinstance(stmt, ast.ClassDef):
            qualname = prefix + stmt.name
            bases = tuple(b for b in (dotted_name(e) for e in stmt.bases) if b)
            functions = [s for s in _same_scope(stmt.body) if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            signatures = {f.name: signature(f, is_bound_method(qualname, f)) for f in functions if f.name in signed}
            summary.classes[qualname] = ClassSummary(
                bases, frozenset(f.name for f in functions), stmt.lineno, stmt.end_lineno or stmt.lineno, signatures
            )
            inner = qualname + "."
        else:
            inner = f"{prefix}{stmt.name}.<locals>."
        if nested is None or _any_between(nested, stmt.lineno + 1, stmt.end_lineno or stmt.lineno):
            _classes(stmt.body, inner, summary, nested, signed)


def _any_between(lines: list[int], first: int, last: int) -> bool:
    i = bisect.bisect_left(lines, first)
    return i < len(lines) and lines[i] <= last


def summarize(
    tree: ast.Module,
    module: str,
    is_package: bool,
    nested: list[int] | None = None,
    signed: frozenset[str] = frozenset(),
) -> ModuleSummary:
    """The module's summary; `nested` is `nested_class_lines` of its source, a shortcut for large files; `signed`
    names the methods whose signatures it keeps (the pack's names)."""
    summary = ModuleSummary(module=module, is_package=is_package)
    for stmt in tree.body:
        # a top-level statement holding a class or function (directly, or under if/try): the sparse parse keeps
        # it whole, header included, so that what it holds still parses
        if isinstance(stmt, _DEFINITION) or any(isinstance(s, _DEFINITION) for s in _same_scope([stmt])):
            decorators = stmt.decorator_list if isinstance(stmt, _DEFINITION) else []
            first = min([stmt.lineno, *(d.lineno for d in decorators)])
            summary.definitions.append((first, stmt.end_lineno or stmt.lineno))
    for stmt in _same_scope(tree.body):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    summary.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    summary.imports[head] = head
        elif isinstance(stmt, ast.ImportFrom):
            source = absolute_module(module, is_package, stmt.level, stmt.module)
            for alias in stmt.names:
                if alias.name == "*":
                    summary.star_imports.append(source)
                else:
                    summary.imports[alias.asname or alias.name] = f"{source}.{alias.name}" if source else alias.name
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            summary.functions[stmt.name] = _params(stmt)
    _classes(tree.body, "", summary, nested, signed)
    return summary
