"""The real token count of the query a metadata build describes, read off the build's own arguments (SG103's fix).

A build is handed its query: host start offsets (`query_start_loc_np=`), from which the helper builds
`query_start_loc` and whose entry at the request count is the number of real tokens, or, without offsets, a
request count and a width (`num_query_per_req`) from which it builds a uniform query of `requests * width`
tokens. The pack names those parameters. So the count of *that* query is an expression over the arguments of
the very call that is handed the padded count, never a count found elsewhere in the function (a draft decode
step that builds one token per request is not the target's batch).

What the call reaches decides what its arguments mean: the helper as the pack describes it (defined on a
speculator base, or not in the project at all: then only keyword arguments are read), its defaults read from its
definition; or an override defined in the same module that only checks its arguments and forwards them to
`super()`, whose forwarded expressions are followed (DFlash's override of vLLM 0.28.0 supplies
`num_query_per_req=self.num_query_per_req`). Anything else gets no count, with the reason.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specguard.fix_model import NoFix
from specguard.program.ast_tools import defaults
from specguard.program.signatures import Signature

# Expressions a fix may evaluate a second time, or earlier than the callee would: reads, and arithmetic on them.
_READS = (ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Load)
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.USub, ast.UAdd, ast.Not)
MAX_OVERRIDES = 4  # overrides followed, each forwarding to the next through `super()`


@dataclass(frozen=True)
class QueryNames:
    """The pack's names for the parameters that describe a build's query ([padding] query_*)."""

    offsets: tuple[str, ...]
    requests: tuple[str, ...]
    width: tuple[str, ...]


@dataclass(frozen=True)
class Reached:
    """What a call reaches, as the project knows it: the qualified name of its definition ("Cls.method", a
    function's name; None when the project does not hold it) and its signature."""

    qualname: str | None
    signature: Signature | None


# How a rule names a callee and asks the project about it: "Cls.m" for `self.m`, "super(Cls).m" for `super().m`.
Lookup = Callable[[str], Reached]


def real_count(
    call: ast.Call,
    reached: Reached,
    names: QueryNames,
    *,
    caller_self: str | None,
    bases: frozenset[str],
    classes: Mapping[str, ast.ClassDef],
    lookup: Lookup,
    caller: ast.FunctionDef | ast.AsyncFunctionDef,
) -> str | NoFix:
    """The source of an expression, valid where `call` is, for the real token count of the query `call` hands
    the build it reaches; or why there is none.

    `bases`: classes whose definitions of the helpers the pack describes; `classes`: the classes of this module,
    whose overrides can be followed; `lookup` answers for `super()` calls of those overrides.
    """
    if any(isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(call)):
        return NoFix("an argument of the call assigns or suspends, so repeating another could see a new value")
    args = _bound(call, reached.signature)
    if isinstance(args, NoFix):
        return args
    self_expr = ast.Name(caller_self, ast.Load()) if caller_self else None
    for _ in range(MAX_OVERRIDES + 1):
        override = _override(reached, bases, classes)
        if override is None:
            return _count(args, reached.signature, names, caller)
        if isinstance(override, NoFix):
            return override
        cls, method = override
        forward = _forward(method)
        if isinstance(forward, NoFix):
            return forward
        above = lookup(f"super({cls}).{method.name}")
        inner = _bound(forward, above.signature)
        if isinstance(inner, NoFix):
            return inner
        env = _parameters(method, args, self_expr)
        if isinstance(env, NoFix):
            return env
        substituted: dict[str, ast.expr] = {}
        for param, expr in inner.items():
            value = _substitute(expr, env, method.name)
            if isinstance(value, NoFix):
                return value
            substituted[param] = value
        args, reached = substituted, above
    return NoFix(f"more than {MAX_OVERRIDES} overrides forward the call")


def _override(
    reached: Reached, bases: frozenset[str], classes: Mapping[str, ast.ClassDef]
) -> tuple[str, ast.FunctionDef] | NoFix | None:
    """The override the call reaches, when it is one; None for the helper the pack describes (or the sink)."""
    owner, _, name = (reached.qualname or "").rpartition(".")
    if not owner or owner in bases:
        return None
    cls = classes.get(owner)
    method = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == name), None) if cls else None
    if method is None:
        return NoFix(f"the call reaches `{reached.qualname}`, an override in another module, which is not followed")
    return owner, method


def _forward(method: ast.FunctionDef) -> ast.Call | NoFix:
    """The `super().<same>(...)` call an override returns after checks that only return or raise."""
    why = NoFix(
        f"the override `{method.name}` it reaches does more than check its arguments and return "
        f"`super().{method.name}(...)`"
    )
    body = method.body[1:] if method.body and _docstring(method.body[0]) else method.body
    if not body or not isinstance(body[-1], ast.Return) or not isinstance(body[-1].value, ast.Call):
        return why
    call = body[-1].value
    func = call.func
    is_super = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and _named(func.value.func, "super")
    if not is_super or func.attr != method.name:  # type: ignore[union-attr]
        return why
    for stmt in body[:-1]:
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Assert) and _pure(stmt.test):
            continue
        exits = isinstance(stmt, ast.If) and not stmt.orelse and _pure(stmt.test)
        if exits and all(_builds_nothing(s) for s in stmt.body):  # type: ignore[union-attr]
            continue
        return why
    return call


def _builds_nothing(stmt: ast.stmt) -> bool:
    """`raise ...`, `pass`, or a `return` of nothing or a constant: a guard that leaves without a build."""
    if isinstance(stmt, ast.Return):
        return stmt.value is None or isinstance(stmt.value, ast.Constant)
    return isinstance(stmt, (ast.Raise, ast.Pass))


def _bound(call: ast.Call, signature: Signature | None) -> dict[str, ast.expr] | NoFix:
    """Parameter name -> the argument expression passed to it."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return NoFix("the call unpacks `*`/`**` arguments, so which of them describe its query is not known")
    out = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if call.args:
        if signature is None:
            return NoFix("the call passes arguments by position to a helper whose definition is not in the project")
        params = signature.positional[1:] if signature.bound else signature.positional
        if len(call.args) > len(params):
            return NoFix("the call passes more positional arguments than its helper's definition takes")
        out.update(zip(params, call.args, strict=False))
    return out


def _parameters(
    method: ast.FunctionDef, args: dict[str, ast.expr], self_expr: ast.expr | None
) -> dict[str, ast.expr] | NoFix:
    """What each parameter of an override holds for this call: the argument, else the override's default."""
    a = method.args
    if a.vararg or a.kwarg or not a.args:
        return NoFix(f"the override `{method.name}` takes `*args`/`**kwargs`")
    positional = [*a.posonlyargs, *a.args]
    given = {p.arg: d for p, d in defaults(a)}
    if self_expr is None:
        return NoFix("the call is not made on `self`, so the override's `self` is not known here")
    env: dict[str, ast.expr] = {positional[0].arg: self_expr}
    for param in [p.arg for p in positional[1:]] + [p.arg for p in a.kwonlyargs]:
        if param in args:
            env[param] = args[param]
        elif param in given:
            env[param] = given[param]
    return env


def _substitute(expr: ast.expr, env: dict[str, ast.expr], where: str) -> ast.expr | NoFix:
    """`expr`, written in an override, in the caller's terms: its parameters replaced by what they hold."""
    if not _pure(expr):
        return NoFix(f"the override `{where}` forwards an expression that is not a plain read")
    missing: list[str] = []

    class _Replace(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in env:
                return copy.deepcopy(env[node.id])
            missing.append(node.id)
            return node

    out = _Replace().visit(copy.deepcopy(expr))
    if missing:
        return NoFix(f"the override `{where}` forwards `{missing[0]}`, which the call does not set")
    return out


def _count(
    args: dict[str, ast.expr],
    signature: Signature | None,
    names: QueryNames,
    caller: ast.FunctionDef | ast.AsyncFunctionDef,
) -> str | NoFix:
    """The count of the query the arguments describe, for the helper the pack describes."""

    def given(candidates: tuple[str, ...]) -> tuple[str, ast.expr] | None:
        for name in candidates:
            if name in args:
                return name, args[name]
            default = signature.default(name) if signature is not None else None
            if default is not None:
                return name, ast.parse(default, mode="eval").body
        return None

    requests, offsets, width = given(names.requests), given(names.offsets), given(names.width)
    if requests is None:
        return NoFix(f"the call does not say how many requests its query holds (`{'`/`'.join(names.requests)}`)")
    if offsets is not None and not _is_none(offsets[1]):
        if _maybe_none(offsets[1], caller):
            return NoFix(f"`{offsets[0]}=` may be None here, and then the helper builds a different query")
        parts, expr = [offsets, requests], _index(offsets[1], requests[1])
    elif width is not None and not _is_none(width[1]):
        one = isinstance(width[1], ast.Constant) and width[1].value == 1
        parts = [requests] if one else [requests, width]
        expr = requests[1] if one else ast.BinOp(requests[1], ast.Mult(), width[1])
    else:
        return NoFix(
            f"the call hands its build neither query start offsets (`{'`/`'.join(names.offsets)}`) nor a "
            f"per-request width (`{'`/`'.join(names.width)}`) that the project's definition of it shows"
        )
    impure = next((name for name, value in parts if not _pure(value)), None)
    if impure is not None:
        return NoFix(f"`{impure}=` is not a plain read, so repeating it in the count could change what runs")
    return ast.unparse(expr)


def _index(offsets: ast.expr, requests: ast.expr) -> ast.expr:
    """`int(<offsets>[<requests>])`: the offset after the last request, a host integer."""
    return ast.Call(ast.Name("int", ast.Load()), [ast.Subscript(offsets, requests, ast.Load())], [])


def _pure(node: ast.AST) -> bool:
    """A read (names, attributes, indexing by such, int/bool/None constants) or arithmetic on reads."""
    for n in ast.walk(node):
        if isinstance(n, (ast.BinOp, ast.UnaryOp)) and not isinstance(n.op, _OPERATORS):
            return False
        if isinstance(n, ast.Constant) and not (n.value is None or isinstance(n.value, (bool, int))):
            return False
        if isinstance(n, (ast.Compare, ast.BoolOp)):  # tests of checks: comparisons and `not` of reads
            continue
        if not isinstance(n, (*_READS, *_OPERATORS, ast.cmpop, ast.boolop)):
            return False
    return True


def _maybe_none(expr: ast.expr, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A local or parameter of the caller that is None on some path: a None default or a None assigned."""
    if not isinstance(expr, ast.Name):
        return False
    if any(p.arg == expr.id and _is_none(d) for p, d in defaults(function.args)):
        return True
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == expr.id for t in targets) and _holds_none(node.value):
                return True
    return False


def _holds_none(value: ast.expr) -> bool:
    return _is_none(value) or any(_is_none(n) for n in ast.walk(value) if isinstance(n, ast.Constant))


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _named(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
