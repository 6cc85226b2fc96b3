"""Small `ast` helpers shared by the stage-one summaries, the evaluator and the rules that run on it."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any

from specguard.program.sparse import sparse_lines

Span = tuple[int, int, int, int]  # ast positions: line, byte column, end line, end byte column

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DOTTED = re.compile(r"[A-Za-z_][\w.]*")


def dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a Name/Attribute chain; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def is_super(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def callee_text(func: ast.expr, self_name: str | None) -> str | None:
    """How a call names its function: "self.m" (also through `cls`), "super().m", or a dotted name."""
    if isinstance(func, ast.Attribute):
        if is_super(func.value):
            return f"super().{func.attr}"
        if isinstance(func.value, ast.Name) and func.value.id in (self_name, "self", "cls"):
            return f"self.{func.attr}"
    return dotted(func)


def module_function(
    func: ast.expr, self_name: str | None, imported: Container[str], resolve: Callable[[str], str]
) -> str | None:
    """Last name of the module-level function a call reaches, imports resolved: imported, aliased or through its
    module; None for a method of `self` or of some object (`self.builder.build(...)` is not `build`)."""
    text = callee_text(func, self_name)
    if text is None or text.startswith(("self.", "super().")):
        return None
    if "." in text and text.partition(".")[0] not in imported:
        return None
    return resolve(text).rpartition(".")[2]


def defaults(args: ast.arguments) -> list[tuple[ast.arg, ast.expr]]:
    """Each parameter that has a default, with it (positional ones take the last defaults, as Python binds)."""
    positional = [*args.posonlyargs, *args.args]
    tail = positional[len(positional) - len(args.defaults) :]
    kwonly = [(p, d) for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    return [*zip(tail, args.defaults, strict=True), *kwonly]


def span(node: ast.AST) -> Span:
    line = getattr(node, "lineno", 1)
    col = getattr(node, "col_offset", 0)
    return line, col, getattr(node, "end_lineno", None) or line, getattr(node, "end_col_offset", None) or col


def annotation_names(node: ast.expr | None) -> set[str]:
    """Last names an annotation mentions: `X`, `mod.X`, `"X"`, `X | None`, `Optional[X]`."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a forward reference: names in the text
        return {name.rpartition(".")[2] for name in _DOTTED.findall(node.value)}
    if isinstance(node, ast.BinOp):
        return annotation_names(node.left) | annotation_names(node.right)
    if isinstance(node, ast.Subscript):
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return {n for part in inner for n in annotation_names(part)}
    name = last_name(node)
    return {name} if name else set()


def has_decorator(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, name: str) -> bool:
    return any(last_name(d.func if isinstance(d, ast.Call) else d) == name for d in func.decorator_list)


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists inside a compound statement that runs in the same scope (not a def or class)."""
    if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        return [stmt.body, stmt.orelse]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [stmt.body]
    if isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
        return [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
    if isinstance(stmt, ast.Match):
        return [case.body for case in stmt.cases]
    return []


def same_scope(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of one scope, looking through `if`/`try`/`with`/loops (TYPE_CHECKING imports, fallbacks)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        for block in _blocks(stmt):
            out.extend(same_scope(block))
    return out


Function = ast.FunctionDef | ast.AsyncFunctionDef


def scopes(tree: ast.Module) -> Iterator[tuple[str | None, Function]]:
    """Every function not nested in another, as (its class's `__qualname__` or None, function): module-level
    functions and the methods of classes at any depth (under `if`/`try`, in a class or a function). A function
    nested in a function is part of it; a class nested in one is not (as program/cst_tools.py's `scopes`)."""
    yield from _scopes(tree.body, None, "", methods=True)


def _scopes(
    body: list[ast.stmt], class_name: str | None, prefix: str, methods: bool
) -> Iterator[tuple[str | None, Function]]:
    for stmt in same_scope(body):
        if isinstance(stmt, FUNCTIONS):
            if methods:
                yield class_name, stmt
            yield from _scopes(stmt.body, None, f"{prefix}{stmt.name}.<locals>.", methods=False)
        elif isinstance(stmt, ast.ClassDef):
            qualname = prefix + stmt.name
            yield from _scopes(stmt.body, qualname, qualname + ".", methods=True)


def is_bound_method(class_name: str | None, func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method whose first parameter is the instance or class (not a staticmethod, not a plain function)."""
    return class_name is not None and not has_decorator(func, "staticmethod")


def source_segment(text: str, node: ast.AST) -> str | None:
    """`ast.get_source_segment(text, node)`, with `text` split into lines once for every node asked about (the
    standard library splits it again, character by character, for each: quadratic over a file's fixes)."""
    end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end_line is None or end_col is None or not hasattr(node, "lineno"):
        return None
    lines, first, col = _source_lines(text), node.lineno - 1, node.col_offset  # type: ignore[attr-defined]
    if first == end_line - 1:
        return lines[first].encode()[col:end_col].decode()
    head, tail = lines[first].encode()[col:].decode(), lines[end_line - 1].encode()[:end_col].decode()
    return "".join([head, *lines[first + 1 : end_line - 1], tail])


@functools.lru_cache(maxsize=4)
def _source_lines(text: str) -> tuple[str, ...]:
    return tuple(sparse_lines(text))  # as CPython's parser numbers them (a form feed ends no line)


def cached_on(node: ast.AST, name: str, compute: Callable[[ast.AST], Any]) -> Any:
    """`compute(node)`, kept on the node itself: it lives exactly as long as the tree (an id-keyed table would
    answer for a new node that reuses a freed one's id)."""
    key = f"_specguard_{name}"
    found = getattr(node, key, None)
    if found is None:
        found = compute(node)
        setattr(node, key, found)
    return found


def walked(node: ast.AST) -> Iterable[ast.AST]:
    """`ast.walk(node)`; for a statement or a module (a function the evaluation and the rules each read whole), as a
    tuple kept on it. Never kept for an expression: one may be copied and rewritten (a predicate inlined into its
    caller's test), and its copy would keep the original's nodes."""
    if isinstance(node, (ast.stmt, ast.Module)):
        return cached_on(node, "walked", lambda n: tuple(ast.walk(n)))  # type: ignore[no-any-return]
    return ast.walk(node)


def absolute_module(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The module `from <dots><target> import ...` in `module` names (its package for `from . import x`)."""
    if level == 0:
        return target or ""
    parts = module.split(".") if module else []
    package = parts if is_package else parts[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*base, *([target] if target else [])])
