"""Questions about a function's own syntax, asked by the statements, the calls and the evaluator's entry points."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from specguard.program.ast_tools import cached_on, walked


def own_nodes(node: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a function body, not of the functions, classes and lambdas nested in it (kept on a function, as
    `walked` keeps its walk)."""
    if isinstance(node, ast.stmt):
        return cached_on(node, "own_nodes", lambda n: tuple(_own_nodes(n)))  # type: ignore[no-any-return]
    return _own_nodes(node)


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        yield sub
        if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(sub))


def dropped_calls(node: ast.AST) -> set[int]:
    """The calls of a function whose result is dropped (expression statements, `with` items bound to nothing)."""
    return cached_on(node, "dropped", _read_dropped_calls)  # type: ignore[no-any-return]


def _read_dropped_calls(node: ast.AST) -> set[int]:
    dropped: set[int] = set()
    for sub in own_nodes(node):
        if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Call):
            dropped.add(id(sub.value))
        elif isinstance(sub, ast.withitem) and sub.optional_vars is None and isinstance(sub.context_expr, ast.Call):
            dropped.add(id(sub.context_expr))  # `with ctx(...):` binds nothing: what the call returns is not used
    return dropped


def stores_state(node: ast.AST) -> bool:
    """Whether a function may change an object its caller holds: it stores into an attribute or an item of one of
    its parameters, or calls a method of its first parameter (`self`), which may. A dropped call of one is
    followed for its writes; what it stores into its own locals or module objects is not the caller's."""

    def stores(n: ast.AST) -> bool:
        args = getattr(n, "args", None)
        if not isinstance(args, ast.arguments):
            return False
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        first = (args.posonlyargs or args.args)[:1]
        me = first[0].arg if first else None
        for sub in own_nodes(n):
            if isinstance(sub, (ast.Attribute, ast.Subscript)) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                base = sub.value
                while isinstance(base, (ast.Attribute, ast.Subscript)):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in params:
                    return True
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                receiver = sub.func.value
                if isinstance(receiver, ast.Name) and receiver.id == me:
                    return True
            elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr":
                return True
        return False

    return cached_on(node, "stores_state", stores)


def assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for sub in walked(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names
