"""SG201's fix: a merge that reduced a per-layer flag over the specs first requires the specs to agree on it.

The values are collected in a set just before the statement that held the reduction, the merge fails unless the
set has at most one value, and the reduction runs over that set instead of over the specs. The failure is the
method's own kind: an `assert` where the method checks agreement with asserts (vLLM's merges do, and vLLM's
callers that probe a merge to decide KV-cache grouping, `is_kv_cache_spec_uniform` and the grouping itself,
catch `AssertionError`), `raise AssertionError(...)` where it has no assert. Where the layers agree, `any`, `all`,
`max` and `min` of the distinct values give what they gave over every layer's value, an empty group included,
so the merge returns what it returned before.
"""

from __future__ import annotations

import ast

from specguard.fix_model import NodeFix, NoFix, split_lines
from specguard.fixes.ast_edits import argument_of, enclosing_statement, insert_before, place
from specguard.fixes.layout import Layout, flat, has_comment
from specguard.program.ast_tools import FUNCTIONS, source_segment

AGREEING = ("any", "all", "max", "min")  # reductions that give the same over the distinct values as over all
_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)


def agreement_fix(
    text: str, method: ast.FunctionDef | ast.AsyncFunctionDef, flag: str, reduction: ast.Call, layout: Layout
) -> NodeFix | NoFix:
    """The fix for `reduction` (a call of one of `AGREEING` over the flag's per-spec values) in the merge
    `method`, a classmethod of the module `text`; or why there is none."""
    name = reduction.func.id if isinstance(reduction.func, ast.Name) else None
    if name not in AGREEING or len(reduction.args) != 1 or reduction.keywords:
        return NoFix(f"only a one-argument `{'`, `'.join(AGREEING)}` of the values can be made to require agreement")
    statement = enclosing_statement(method, reduction)
    if statement is None:
        return NoFix("the reduction sits in a lambda or comprehension, whose names a check before it cannot see")
    if not _runs_once_where_it_is(text, statement, reduction):
        return NoFix("the reduction is part of a loop or `elif` header, which a check before it would not cover")
    if has_comment(source_segment(text, reduction) or "#") is not False:
        return NoFix("the reduction holds a comment, which replacing it would lose")
    collected = _collection(text, reduction.args[0])
    if collected is None:
        return NoFix("the values span lines with a comment or a trailing comma, which a fix cannot move")
    lines = split_lines(text)
    indent = lines[statement.lineno - 1][: statement.col_offset]
    values = _name(method, flag, indent, layout)
    owner = method.args.args[0].arg if method.args.args else None
    head, parts, tail = collected
    new = layout.bracket(indent, f"{values} = {head}", parts, tail)
    if not layout.fits(*new):
        return NoFix("the values' collection does not fit the line length on lines a formatter would keep")
    message = f"all layers of one KV cache group must agree on {flag}, got {{{values}}}"
    if owner is not None:
        message = f"{{{owner}.__name__}}: {message}"
    asserts = _asserts(method)
    if asserts:
        new += layout.statement_with_message(indent, f"assert len({values}) <= 1, ", message, True, "")
    else:
        new.append(f"{indent}if len({values}) > 1:")
        new += layout.statement_with_message(indent + layout.unit, "raise AssertionError(", message, True, ")")
    check = insert_before(text, statement, [line[len(indent) :] for line in new])
    expression = (f"{name}(", [values], ")", f"{name}({values})")
    replaced = place(text, reduction, layout, expression, statement, argument_of(statement, reduction))
    if check is None or replaced is None:
        return NoFix("the fixed lines cannot be laid out within the line length where the reduction is")
    how = "assert" if asserts else "raise AssertionError"
    return NodeFix(
        "safe",
        f"Require every spec to agree on `{flag}` ({how} as the merge's other checks do), then `{name}()` the "
        f"one value",
        (),
        (check, replaced),
    )


def _runs_once_where_it_is(text: str, statement: ast.stmt, reduction: ast.Call) -> bool:
    """A simple statement, or an `if` (not an `elif`) whose test holds the reduction: lines inserted before it
    run exactly when the reduction would."""
    if isinstance(statement, _SIMPLE):
        return True
    if not isinstance(statement, ast.If) or not any(n is reduction for n in ast.walk(statement.test)):
        return False
    return split_lines(text)[statement.lineno - 1][statement.col_offset :].startswith("if")


def _collection(text: str, spread: ast.expr) -> tuple[str, list[str], str] | None:
    """The distinct values of what the reduction reduces, as (opening, parts, closing) to lay out: the same
    comprehension in braces (`{s.flag for s in specs}`, also for `set(<generator>)`), or `set(<iterable>)`."""
    named_set = isinstance(spread, ast.Call) and isinstance(spread.func, ast.Name) and spread.func.id == "set"
    if named_set and len(spread.args) == 1 and not spread.keywords and isinstance(spread.args[0], ast.GeneratorExp):  # type: ignore[attr-defined]
        spread = spread.args[0]  # type: ignore[attr-defined]
    if isinstance(spread, (ast.GeneratorExp, ast.ListComp, ast.SetComp)):
        pieces = [_segment(text, spread.elt)]
        for gen in spread.generators:
            target, iterable = _segment(text, gen.target), _segment(text, gen.iter)
            clause = f"{'async ' if gen.is_async else ''}for {target} in {iterable}"
            pieces.append(clause if target and iterable else None)
            pieces += [f"if {test}" if test else None for test in (_segment(text, t) for t in gen.ifs)]
        kept = [p for p in pieces if p is not None]
        return ("{", kept, "}") if len(kept) == len(pieces) else None
    whole = _segment(text, spread)
    return ("set(", [whole], ")") if whole is not None else None


def _segment(text: str, node: ast.expr) -> str | None:
    """The source of `node` on one line (a target or an iterable in brackets keeps them)."""
    source = source_segment(text, node)
    return flat(source) if source is not None else None


def _asserts(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the method checks with `assert` (in its own body, not in a nested function)."""
    pending: list[ast.AST] = list(method.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Assert):
            return True
        if not isinstance(node, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _name(method: ast.FunctionDef | ast.AsyncFunctionDef, flag: str, indent: str, layout: Layout) -> str:
    """A name the method does not use for the collected values: `<flag>_values`, or a shorter one where the
    check's longest fixed line would not fit with it."""
    taken = {n.id for n in ast.walk(method) if isinstance(n, ast.Name)}
    taken |= {a.arg for a in ast.walk(method) if isinstance(a, ast.arg)}

    def free(stem: str) -> str:
        return next(v for v in (f"{stem}{i or ''}" for i in range(len(taken) + 1)) if v not in taken)

    names = [free(f"{flag}_values"), free("layer_values"), free("values")]
    return next((n for n in names if layout.fits(f"{indent}assert len({n}) <= 1, (")), names[-1])
