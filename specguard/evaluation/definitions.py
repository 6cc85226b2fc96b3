"""Which test a local holds: `spec_mode = mode.is_target_verify() or mode.is_draft_extend_v2()`, tested later as
`if spec_mode and dcp: raise`. Where a path finds the local false, its defining test is false there too, so that a
later test of one of its parts (`if mode.is_target_verify():`) is decided the same way. Read from the source alone,
and only where nothing the test reads can have been bound again between the definition and the use."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from specguard.program.ast_tools import cached_on, walked

_TESTS = (ast.BoolOp, ast.Compare, ast.UnaryOp, ast.Call)


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions_of(tree: ast.Module) -> list[Function]:
    """Every function of a module, nested ones too (what `enclosing_function` looks through; cached by the caller)."""
    return [node for node in walked(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def enclosing_function(functions: list[Function], node: ast.AST) -> Function | None:
    """The innermost of `functions` whose lines hold `node`."""
    line = getattr(node, "lineno", 0)
    holding = [f for f in functions if f.lineno <= line <= (f.end_lineno or f.lineno)]
    return max(holding, key=lambda f: f.lineno, default=None)


def defining_test(function: Function, name: str, use: ast.AST) -> ast.expr | None:
    """The test `name` was bound to by its only binding in `function`, before `use`; None where it is bound more
    than once, to something else than a test, or where a name the test reads (or an attribute of one) is bound again
    after the definition."""
    bindings = [(node, target) for node, target in _bindings(function) if _root(target) == name and target is not None]
    if len(bindings) != 1:
        return None
    node, target = bindings[0]
    if not (isinstance(node, ast.Assign) and isinstance(target, ast.Name) and isinstance(node.value, _TESTS)):
        return None
    if node.lineno >= getattr(use, "lineno", 0):
        return None
    read = {_root(n) for n in walked(node.value) if isinstance(n, (ast.Name, ast.Attribute))} - {None}
    for other, bound in _bindings(function):
        if other is not node and _root(bound) in read and other.lineno > node.lineno:
            return None
    return node.value


def _bindings(function: ast.AST) -> tuple[tuple[ast.stmt | ast.expr, ast.expr | None], ...]:
    """Each binding statement (or walrus) of the function and each target it binds, nested functions included
    (they may rebind through `nonlocal`: read as a binding, which only makes the answer None more often); read once
    per function."""
    return cached_on(function, "bindings", lambda f: tuple(_read_bindings(f)))  # type: ignore[no-any-return]


def _read_bindings(function: ast.AST) -> Iterator[tuple[ast.stmt | ast.expr, ast.expr | None]]:
    for node in walked(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield from ((node, t) for t in _unpacked(target))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            yield node, node.target
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            yield from ((node, t) for t in _unpacked(node.target))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    yield from ((node, t) for t in _unpacked(item.optional_vars))
        elif isinstance(node, ast.NamedExpr):
            yield node, node.target


def _unpacked(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _unpacked(element.value if isinstance(element, ast.Starred) else element)
    else:
        yield target


def _root(node: ast.expr | None) -> str | None:
    """The name an expression's attribute chain starts from (`self` of `self.a.b`, `x` of `x[0].y`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None
