"""libcst changes the rules' fixes share: delete statements (and the `if` they leave empty), drop an argument."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from specguard.fix_model import Change
from specguard.program.cst_tools import kids


def _pure(node: cst.CSTNode) -> bool:
    """No call, assignment expression, await or yield: evaluating it can be skipped without a change."""
    if isinstance(node, (cst.Call, cst.NamedExpr, cst.Await, cst.Yield)):
        return False
    return all(_pure(k) for k in kids(node))


def _suite_plan(statements: Sequence[cst.BaseStatement], doomed: set[int]) -> tuple[list[cst.CSTNode], bool] | None:
    """(statements to remove, whether the whole suite goes), or None when a block would be left empty."""
    removed: list[cst.CSTNode] = []
    kept = False
    for stmt in statements:
        if id(stmt) in doomed:
            removed.append(stmt)
            continue
        plan = _compound_plan(stmt, doomed)
        if plan is None:
            return None
        nodes, gone = plan
        if gone:
            removed.append(stmt)
        else:
            removed.extend(nodes)
            kept = True
    return removed, not kept


def _compound_plan(stmt: cst.CSTNode, doomed: set[int]) -> tuple[list[cst.CSTNode], bool] | None:
    if isinstance(stmt, cst.If):
        parts = [_suite_plan(stmt.body.body, doomed)]  # type: ignore[arg-type]
        if isinstance(stmt.orelse, cst.If):
            parts.append(_compound_plan(stmt.orelse, doomed))
        elif isinstance(stmt.orelse, cst.Else):
            parts.append(_suite_plan(stmt.orelse.body.body, doomed))  # type: ignore[arg-type]
        if any(p is None for p in parts):
            return None
        if all(p[1] for p in parts if p is not None):  # every branch emptied: the `if` itself goes
            return ([], True) if _pure(stmt.test) else None
        if any(p[1] for p in parts if p is not None):
            return None
        return [n for p in parts if p is not None for n in p[0]], False
    if isinstance(stmt, (cst.For, cst.While, cst.With, cst.Try)):
        suites = [n for n in kids(stmt) if isinstance(n, cst.IndentedBlock)]
        plans = [_suite_plan(s.body, doomed) for s in suites]  # type: ignore[arg-type]
        if any(p is None or p[1] for p in plans):
            return None
        return [n for p in plans if p is not None for n in p[0]], False
    return [], False


def _within(node: cst.CSTNode, wanted: int) -> bool:
    return id(node) == wanted or any(_within(k, wanted) for k in kids(node))


def delete_statements(function: cst.FunctionDef, statements: Sequence[cst.BaseStatement]) -> list[Change] | None:
    """Changes deleting `statements` from `function`; an `if` all of whose branches they empty goes too
    (when its test has no side effect). None when that would leave some other block empty."""
    if not isinstance(function.body, cst.IndentedBlock):
        return None
    plan = _suite_plan(function.body.body, {id(s) for s in statements})
    if plan is None or plan[1]:
        return None
    if not all(any(_within(node, id(s)) for node in plan[0]) for s in statements):
        return None  # one sits where the plan does not look (an `except` block): leave it to a person
    return [(node, cst.RemoveFromParent()) for node in plan[0]]


def delete_statement(
    root: cst.CSTNode, statement: cst.BaseStatement, holders: dict[int, cst.BaseStatement] | None = None
) -> Change:
    """Delete one statement under `root`; the only statement of its block becomes `pass` instead. `holders`: the
    module's `top_statements`, where `root` is the module (only the statement holding it is walked)."""
    top = holders.get(id(statement)) if holders is not None else None
    path = [root, *(_path(top, statement) or [])] if top is not None else _path(root, statement) or []
    block = path[-2] if len(path) > 1 else None
    alone = isinstance(block, cst.IndentedBlock) and len(block.body) == 1
    return statement, cst.SimpleStatementLine([cst.Pass()]) if alone else cst.RemoveFromParent()


def without_keyword(call: cst.Call, name: str, fits: Callable[[str], bool] = lambda line: False) -> Change:
    """The call without its `name=` argument; a removed last argument leaves its comma and the whitespace
    before `)` to the new last one, so `f(a, x=1)` becomes `f(a)` and a one-per-line call keeps its layout.
    A call a formatter had split only because it was too long (its arguments together on a line of their own,
    no trailing comma) is joined onto one line when `fits` says the line it then makes fits, as the formatter
    would join it."""
    args = [a for a in call.args if a.keyword is None or a.keyword.value != name]
    last = call.args[-1]
    if args and last not in args:
        args[-1] = args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    new = call.with_changes(args=args)
    joined = _joined(new)
    return call, joined if joined is not None and fits(cst.Module([]).code_for_node(joined)) else new


def _joined(call: cst.Call) -> cst.Call | None:
    """The call with its arguments hugged by its brackets, when they sat together on one line between them."""
    if not call.args or not isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        return None
    last = call.args[-1]
    if isinstance(last.comma, cst.Comma) or not isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
        return None  # a trailing comma keeps a formatter's split ("magic trailing comma")
    inner = call.with_changes(whitespace_before_args=cst.SimpleWhitespace(""))
    inner = inner.with_changes(args=[*call.args[:-1], last.with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))])
    return None if "\n" in cst.Module([]).code_for_node(inner) else inner


_SCOPES = (cst.Lambda, cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp, cst.FunctionDef, cst.ClassDef)


def _path(node: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode] | None:
    if node is target:
        return [node]
    for kid in kids(node):
        if (rest := _path(kid, target)) is not None:
            return [node, *rest]
    return None


def enclosing_statement(function: cst.FunctionDef, target: cst.CSTNode) -> cst.BaseStatement | None:
    """The innermost statement of `function`'s blocks that holds `target`, where statements inserted before it
    see the same names `target` sees: None when a lambda, comprehension or nested definition lies between."""
    path = _path(function.body, target)
    if path is None:
        return None
    found = None
    for i, node in enumerate(path[1:], 1):
        if isinstance(path[i - 1], cst.IndentedBlock) and isinstance(node, cst.BaseStatement):
            found = i
    if found is None or any(isinstance(n, _SCOPES) for n in path[found + 1 : -1]):
        return None
    return path[found]  # type: ignore[return-value]
