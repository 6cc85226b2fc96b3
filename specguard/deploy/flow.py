"""Static evaluation of vLLM functions for one serving config: which raise, assert, warning or assignment a config
reaches, and under which conditions the config does not decide.

The evaluator walks a function's statements (`ast`) with the values the serving config fixes (the parallel sizes,
the speculative method, the KV-transfer connector, ...). A test it can decide picks its branch; a test it cannot
decide (a GPU property, a model's architecture) becomes a named condition, and what happens under it is recorded
with that condition, so a verdict is either certain or "not judged because it depends on <this expression>".
It never imports or runs vLLM code: only literals, names, attributes, comparisons, arithmetic, the vLLM functions
it can resolve in the tree (inlined), and a short list of pure builtins and str/dict/list methods are evaluated.

Two simplifications keep verdicts useful: a raise (or a failing assert) is recorded and evaluation goes on
past it as if it had not fired, so each validation is judged on its own and an unrelated failure, or a value
this evaluation holds stale, never hides the hazard being judged; an `assert` whose test is undecided is
assumed to hold for the code after it. An undecided early `return` does make what follows conditional.
"""

from __future__ import annotations

import ast
import itertools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specguard.deploy.source import ClassInfo, ParsedModule, SourceTree, dotted, message_of


class _Unknown:
    """A value the serving config does not determine."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:  # a bug guard: three-valued logic must never fall back to Python truthiness
        raise TypeError("UNKNOWN has no truth value; use truth()")


UNKNOWN: Any = _Unknown()
NOT_HANDLED: Any = object()


@dataclass(eq=False)
class Obj:
    """An object whose attributes the evaluation knows (a config section, a metadata builder).

    `defaults`: a missing attribute falls back to the class-level value written in the source (a dataclass
    built from the user's JSON, a class's ClassVars); otherwise it is UNKNOWN (a config section vLLM fills in
    from many places).
    """

    cls: ClassInfo | None
    fields: dict[str, Any] = field(default_factory=dict)
    defaults: bool = False
    label: str = ""
    # Attributes the situation fixes: assignments to them in evaluated code are ignored (a builder built for
    # a draft layer stays a draft builder whatever its constructor computes from the layers).
    pinned: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<{self.label or (self.cls.name if self.cls else 'object')}>"


@dataclass(frozen=True)
class ClassRef:
    info: ClassInfo


@dataclass(frozen=True)
class EnumMember:
    cls: ClassInfo
    name: str

    def __repr__(self) -> str:
        return f"{self.cls.name}.{self.name}"


@dataclass(frozen=True, eq=False)
class Function:
    module: ParsedModule
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    owner: ClassInfo | None = None
    closure: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")


@dataclass(frozen=True, eq=False)
class Bound:
    func: Function
    self_value: Any


@dataclass(frozen=True)
class SuperRef:
    owner: ClassInfo
    self_value: Any


@dataclass(frozen=True)
class Opaque:
    """Something outside the tree or not modelled, known by name: `builtins.getattr`, `json.loads`, ..."""

    name: str


@dataclass(frozen=True)
class ModuleRef:
    name: str


@dataclass(frozen=True)
class LiteralType:
    values: tuple[Any, ...]


@dataclass(frozen=True)
class PyMethod:
    """A whitelisted method of a plain Python value (str.replace, dict.pop, list.remove, ...)."""

    target: Any
    name: str


@dataclass(frozen=True, eq=False)
class Token:
    """A value a client of the evaluator stands in for (an argparse parser being filled); see `hook`."""

    kind: str


@dataclass(frozen=True, eq=False)
class TokenAttr:
    """`token.attr`: calling it goes to the hook."""

    token: Token
    attr: str


@dataclass(frozen=True, eq=False)
class Cond:
    """A test the serving config does not decide; it names the reason a verdict is not certain."""

    node: ast.AST
    file: Path
    relpath: str

    @property
    def text(self) -> str:
        return " ".join(ast.unparse(self.node).split())

    def describe(self) -> str:
        return f"`{self.text}` ({self.relpath}:{getattr(self.node, 'lineno', 0)})"


Path_ = frozenset  # of (Cond, bool)


@dataclass(frozen=True, eq=False)
class Site:
    kind: str  # raise | assert | warning | assign | call
    module: ParsedModule
    node: ast.AST
    message: str

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


@dataclass
class Outcome:
    site: Site
    path: frozenset
    detail: Any = None


@dataclass
class State:
    locals: dict[str, Any]
    writes: dict[tuple[int, str], Any]
    path: frozenset

    def copy(self, path: frozenset | None = None) -> State:
        return State(dict(self.locals), dict(self.writes), self.path if path is None else path)


@dataclass
class Flow:
    normal: State | None = None
    returns: list[tuple[State, Any]] = field(default_factory=list)
    breaks: list[State] = field(default_factory=list)
    continues: list[State] = field(default_factory=list)


@dataclass
class Frame:
    module: ParsedModule
    owner: ClassInfo | None
    closure: dict[str, Any] | None
    depth: int


_PURE_STR = {"lower", "upper", "strip", "lstrip", "rstrip", "replace", "startswith", "endswith", "split", "join"}
_PURE_STR |= {"removeprefix", "removesuffix", "format", "partition", "rpartition", "count", "find", "isdigit"}
_DICT = {"get", "items", "keys", "values", "pop", "copy", "setdefault", "update"}
_LIST = {"append", "remove", "extend", "copy", "index", "count", "pop", "insert"}
_SET = {"add", "discard", "copy", "union"}
_CONTAINERS = (list, tuple, set, frozenset, dict)
_BUILTINS = {
    "getattr",
    "hasattr",
    "isinstance",
    "len",
    "any",
    "all",
    "min",
    "max",
    "sorted",
    "list",
    "tuple",
    "set",
    "frozenset",
    "dict",
    "int",
    "str",
    "float",
    "bool",
    "abs",
    "sum",
    "repr",
    "type",
    "super",
}
_PYTYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "dict": dict,
    "list": list,
    "tuple": tuple,
    "set": set,
}
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_,
}
_ORDER: dict[type, Callable[[Any, Any], Any]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def known(value: Any) -> bool:
    """A plain value with nothing unknown inside it."""
    if value is UNKNOWN:
        return False
    if isinstance(value, dict):
        return all(known(k) and known(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(known(v) for v in value)
    return True


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a is UNKNOWN or b is UNKNOWN:
        return False
    if isinstance(a, (Obj, Function, Bound)) or isinstance(b, (Obj, Function, Bound)):
        return False
    try:
        return type(a) is type(b) and known(a) and known(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - comparing arbitrary evaluated values must not fail the evaluation
        return False


def merge(states: list[State]) -> State | None:
    """One state for paths that join again: values they disagree on become UNKNOWN."""
    if not states:
        return None
    if len(states) == 1:
        return states[0]
    out = State({}, {}, frozenset.intersection(*(s.path for s in states)))
    for attr in ("locals", "writes"):
        target = getattr(out, attr)
        keys = set().union(*(getattr(s, attr).keys() for s in states))
        for key in keys:
            values = [getattr(s, attr).get(key, UNKNOWN) for s in states]
            target[key] = values[0] if all(_same(values[0], v) for v in values[1:]) else UNKNOWN
    return out


class OutOfBudget(Exception):
    """The evaluation ran more statements than it may; the caller reports the hazard as not judged."""


class Evaluator:
    """Evaluates functions of one source tree; outcomes of every run accumulate in `outcomes`."""

    def __init__(
        self,
        tree: SourceTree,
        *,
        hook: Callable[..., Any] | None = None,
        watch_calls: Iterable[ast.AST] = (),
        watch_attrs: Iterable[str] = (),
        max_depth: int = 4,
        budget: int = 60_000,
    ) -> None:
        self.tree = tree
        self.hook = hook
        self.watch_calls = {id(n) for n in watch_calls}
        self.watch_attrs = set(watch_attrs)
        self.max_depth = max_depth
        self.budget = budget
        self.outcomes: list[Outcome] = []
        self._conds: dict[int, Cond] = {}
        self._module_values: dict[tuple[str, str], Any] = {}
        self._resolving: set[tuple[str, str]] = set()

    # -- entry points -------------------------------------------------------------------------------------------

    def call_function(
        self,
        func: Function,
        args: list[Any],
        kwargs: dict[str, Any],
        path: frozenset = frozenset(),
        self_value: Any = None,
        depth: int = 0,
    ) -> tuple[Any, State]:
        """Run `func` with these arguments; returns its value (UNKNOWN if paths disagree) and the end state."""
        state = State({}, {}, path)
        value = self._invoke(func, self_value, args, kwargs, state, depth, force=True)
        return value, state

    def cond(self, node: ast.AST, module: ParsedModule) -> Cond:
        found = self._conds.get(id(node))
        if found is None:
            found = Cond(node, module.path, self.tree.relpath(module.path))
            self._conds[id(node)] = found
        return found

    # -- statements ---------------------------------------------------------------------------------------------

    def exec_block(self, stmts: list[ast.stmt], frame: Frame, state: State) -> Flow:
        flow = Flow()
        current: State | None = state
        for stmt in stmts:
            if current is None:
                break
            self.budget -= 1
            if self.budget < 0:
                raise OutOfBudget
            res = self.exec_stmt(stmt, frame, current)
            flow.returns += res.returns
            flow.breaks += res.breaks
            flow.continues += res.continues
            current = res.normal
        flow.normal = current
        return flow

    def exec_stmt(self, stmt: ast.stmt, frame: Frame, state: State) -> Flow:
        if isinstance(stmt, ast.Expr):
            self.eval(stmt.value, frame, state)
            return Flow(normal=state)
        if isinstance(stmt, ast.Assign):
            value = self.eval(stmt.value, frame, state)
            for target in stmt.targets:
                self.assign(target, value, frame, state, stmt)
            return Flow(normal=state)
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, self.eval(stmt.value, frame, state), frame, state, stmt)
            return Flow(normal=state)
        if isinstance(stmt, ast.AugAssign):
            current = self.eval(_as_load(stmt.target), frame, state)
            value = self._binop(stmt.op, current, self.eval(stmt.value, frame, state))
            self.assign(stmt.target, value, frame, state, stmt)
            return Flow(normal=state)
        if isinstance(stmt, ast.If):
            return self._branch(stmt.test, stmt.body, stmt.orelse, frame, state)
        if isinstance(stmt, ast.Return):
            value = self.eval(stmt.value, frame, state) if stmt.value is not None else None
            return Flow(returns=[(state, value)])
        if isinstance(stmt, ast.Raise):
            # Recorded, and evaluation goes on as if it had not fired: each validation is judged on its own
            # (a value this evaluation holds stale, e.g. one an uninlined call would have set, must not make an
            # unrelated raise hide the rest of the function).
            if stmt.exc is not None:
                self.record("raise", frame.module, stmt, message_of(stmt.exc), state.path)
            return Flow(normal=state)
        if isinstance(stmt, ast.Assert):
            truth = self.truth(self.eval(stmt.test, frame, state), frame, state)
            message = message_of(stmt.msg) if stmt.msg is not None else ""
            if truth is False:
                self.record("assert", frame.module, stmt, message, state.path)
                return Flow(normal=state)
            if truth is UNKNOWN:
                cond = self.cond(stmt.test, frame.module)
                self.record("assert", frame.module, stmt, message, state.path | {(cond, False)})
            return Flow(normal=state)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            return self._for(stmt, frame, state)
        if isinstance(stmt, ast.While):
            return self._loop_unknown(stmt, stmt.test, stmt.body, frame, state)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            flow = self.exec_block(stmt.body, frame, state)  # type: ignore[attr-defined]
            if flow.normal is not None:
                rest = self.exec_block(stmt.orelse, frame, flow.normal)  # type: ignore[attr-defined]
                flow = _chain(flow, rest)
            if flow.normal is not None and stmt.finalbody:  # type: ignore[attr-defined]
                flow = _chain(flow, self.exec_block(stmt.finalbody, frame, flow.normal))  # type: ignore[attr-defined]
            return flow
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                value = self.eval(item.context_expr, frame, state)
                if item.optional_vars is not None:
                    self.assign(
                        item.optional_vars, UNKNOWN if not isinstance(value, Obj) else value, frame, state, stmt
                    )
            return self.exec_block(stmt.body, frame, state)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            state.locals[stmt.name] = Function(frame.module, stmt, None, state.locals)
            return Flow(normal=state)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self._local_import(stmt, frame, state)
            return Flow(normal=state)
        if isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                self._delete(target, frame, state)
            return Flow(normal=state)
        if isinstance(stmt, ast.Break):
            return Flow(breaks=[state])
        if isinstance(stmt, ast.Continue):
            return Flow(continues=[state])
        if isinstance(stmt, (ast.Pass, ast.Global, ast.Nonlocal)):
            return Flow(normal=state)
        # class definitions, match statements and anything newer: what they bind is unknown
        for name in _assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        return Flow(normal=state)

    def _branch(self, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame, state: State) -> Flow:
        truth = self.truth(self.eval(test, frame, state), frame, state)
        if truth is True:
            return self.exec_block(body, frame, state)
        if truth is False:
            return self.exec_block(orelse, frame, state)
        cond = self.cond(test, frame.module)
        if (cond, True) in state.path:
            return self.exec_block(body, frame, state)
        if (cond, False) in state.path:
            return self.exec_block(orelse, frame, state)
        yes = self.exec_block(body, frame, state.copy(state.path | {(cond, True)}))
        no = self.exec_block(orelse, frame, state.copy(state.path | {(cond, False)}))
        return self._join(yes, no)

    def _join(self, yes: Flow, no: Flow) -> Flow:
        normals = [f.normal for f in (yes, no) if f.normal is not None]
        return Flow(
            normal=merge(normals),
            returns=yes.returns + no.returns,
            breaks=yes.breaks + no.breaks,
            continues=yes.continues + no.continues,
        )

    def _for(self, stmt: ast.For | ast.AsyncFor, frame: Frame, state: State) -> Flow:
        items = self._iterate(self.eval(stmt.iter, frame, state))
        if items is None:
            return self._loop_unknown(stmt, stmt.iter, stmt.body, frame, state)
        flow = Flow()
        current: State | None = state
        broke: list[State] = []
        for item in items:
            if current is None:
                break
            self.assign(stmt.target, item, frame, current, stmt)
            res = self.exec_block(stmt.body, frame, current)
            flow.returns += res.returns
            broke += res.breaks
            current = merge([s for s in [res.normal, *res.continues] if s is not None])
        if current is not None and not broke:
            res = self.exec_block(stmt.orelse, frame, current)
            flow.returns += res.returns
            current = res.normal
        flow.normal = merge([s for s in [current, *broke] if s is not None])
        return flow

    def _loop_unknown(self, stmt: ast.stmt, over: ast.expr, body: list[ast.stmt], frame: Frame, state: State) -> Flow:
        for name in _assigned_names(body) | _assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        cond = self.cond(over, frame.module)  # "the loop body runs", named by what it iterates over
        res = self.exec_block(body, frame, state.copy(state.path | {(cond, True)}))
        after = merge([s for s in [state, res.normal, *res.breaks, *res.continues] if s is not None])
        if after is not None:
            after.path = state.path
            for name in _assigned_names(body):
                after.locals[name] = UNKNOWN
        return Flow(normal=after, returns=res.returns)

    def _iterate(self, value: Any) -> list[Any] | None:
        if isinstance(value, dict) and known(list(value.keys())):
            return list(value.keys())
        if isinstance(value, (list, tuple)) and len(value) <= 256:
            return list(value)
        if isinstance(value, (set, frozenset)) and known(value) and len(value) <= 256:
            return sorted(value, key=repr)
        if isinstance(value, str):
            return list(value)
        if isinstance(value, LiteralType):
            return None
        return None

    def assign(self, target: ast.expr, value: Any, frame: Frame, state: State, stmt: ast.AST) -> None:
        if isinstance(target, ast.Name):
            state.locals[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value) if isinstance(value, (list, tuple)) and len(value) == len(target.elts) else None
            for i, elt in enumerate(target.elts):
                self.assign(elt, values[i] if values is not None else UNKNOWN, frame, state, stmt)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value, frame, state)
            if target.attr in self.watch_attrs:
                self.record("assign", frame.module, stmt, target.attr, state.path, (base, value))
            if isinstance(base, Obj) and target.attr not in base.pinned:
                state.writes[(id(base), target.attr)] = value
        elif isinstance(target, ast.Subscript):
            base = self.eval(target.value, frame, state)
            key = self.eval(target.slice, frame, state)
            in_list = isinstance(base, list) and isinstance(key, int) and -len(base) <= key < len(base)
            if (isinstance(base, dict) and known(key)) or in_list:
                base[key] = value
        elif isinstance(target, ast.Starred):
            self.assign(target.value, UNKNOWN, frame, state, stmt)

    def _delete(self, target: ast.expr, frame: Frame, state: State) -> None:
        if isinstance(target, ast.Subscript):
            base = self.eval(target.value, frame, state)
            key = self.eval(target.slice, frame, state)
            if isinstance(base, dict) and known(key):
                base.pop(key, None)
        elif isinstance(target, ast.Name):
            state.locals[target.id] = UNKNOWN

    def _local_import(self, stmt: ast.Import | ast.ImportFrom, frame: Frame, state: State) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.name if alias.asname else alias.name.split(".")[0]
                known_module = bound.startswith(self.tree.package)
                state.locals[alias.asname or bound] = ModuleRef(bound) if known_module else Opaque(bound)
            return
        source = stmt.module or ""
        if stmt.level:
            parts = frame.module.name.split(".")
            if not frame.module.is_package:
                parts = parts[:-1]
            if stmt.level > 1:
                parts = parts[: len(parts) - (stmt.level - 1)]
            source = ".".join([*parts, source] if source else parts)
        for alias in stmt.names:
            if alias.name != "*":
                state.locals[alias.asname or alias.name] = self._resolved(source, alias.name)

    # -- expressions --------------------------------------------------------------------------------------------

    def eval(self, expr: ast.expr | None, frame: Frame, state: State) -> Any:
        if expr is None:
            return None
        method = getattr(self, f"_e_{type(expr).__name__}", None)
        if method is None:
            return UNKNOWN
        return method(expr, frame, state)

    def _e_Constant(self, e: ast.Constant, frame: Frame, state: State) -> Any:
        return e.value

    def _e_Name(self, e: ast.Name, frame: Frame, state: State) -> Any:
        if e.id in state.locals:
            return state.locals[e.id]
        if frame.closure is not None and e.id in frame.closure:
            return frame.closure[e.id]
        return self.module_value(frame.module, e.id)

    def _e_Attribute(self, e: ast.Attribute, frame: Frame, state: State) -> Any:
        return self.getattr(self.eval(e.value, frame, state), e.attr, state, frame.depth)

    def _e_Tuple(self, e: ast.Tuple, frame: Frame, state: State) -> Any:
        return tuple(self._elements(e.elts, frame, state))

    def _e_List(self, e: ast.List, frame: Frame, state: State) -> Any:
        return self._elements(e.elts, frame, state)

    def _e_Set(self, e: ast.Set, frame: Frame, state: State) -> Any:
        values = self._elements(e.elts, frame, state)
        try:
            return set(values)
        except TypeError:
            return UNKNOWN

    def _elements(self, elts: list[ast.expr], frame: Frame, state: State) -> list[Any]:
        out: list[Any] = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                value = self.eval(elt.value, frame, state)
                items = self._iterate(value)
                if items is None:
                    return [UNKNOWN]  # a container with an unknown part: membership stays undecided
                out.extend(items)
            else:
                out.append(self.eval(elt, frame, state))
        return out

    def _e_Dict(self, e: ast.Dict, frame: Frame, state: State) -> Any:
        out: dict[Any, Any] = {}
        for key, value in zip(e.keys, e.values, strict=True):
            if key is None:
                merged = self.eval(value, frame, state)
                if not isinstance(merged, dict):
                    return UNKNOWN
                out.update(merged)
                continue
            k = self.eval(key, frame, state)
            if not known(k):
                return UNKNOWN
            try:
                out[k] = self.eval(value, frame, state)
            except TypeError:
                return UNKNOWN
        return out

    def _e_JoinedStr(self, e: ast.JoinedStr, frame: Frame, state: State) -> Any:
        parts: list[str] = []
        for value in e.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            assert isinstance(value, ast.FormattedValue)
            inner = self.eval(value.value, frame, state)
            if not known(inner) or not isinstance(inner, (str, int, float, bool)) or value.format_spec is not None:
                return UNKNOWN
            parts.append(repr(inner) if value.conversion == ord("r") else str(inner))
        return "".join(parts)

    def _e_BoolOp(self, e: ast.BoolOp, frame: Frame, state: State) -> Any:
        stop = isinstance(e.op, ast.Or)  # `or` stops at the first truthy value, `and` at the first falsy one
        undecided = False
        value: Any = None
        for operand in e.values:
            value = self.eval(operand, frame, state)
            truth = self.truth(value, frame, state)
            if truth is UNKNOWN:
                undecided = True
            elif truth is stop:
                if not undecided:
                    return value
                # An undecided operand came first: the truth is decided, the exact value only if it is a bool.
                return stop if isinstance(value, bool) else UNKNOWN
        return UNKNOWN if undecided else value

    def _e_UnaryOp(self, e: ast.UnaryOp, frame: Frame, state: State) -> Any:
        value = self.eval(e.operand, frame, state)
        if isinstance(e.op, ast.Not):
            truth = self.truth(value, frame, state)
            return UNKNOWN if truth is UNKNOWN else not truth
        if not known(value) or not isinstance(value, (int, float)):
            return UNKNOWN
        if isinstance(e.op, ast.USub):
            return -value
        if isinstance(e.op, ast.UAdd):
            return +value
        return UNKNOWN

    def _e_BinOp(self, e: ast.BinOp, frame: Frame, state: State) -> Any:
        left = self.eval(e.left, frame, state)
        right = self.eval(e.right, frame, state)
        if isinstance(e.op, ast.BitOr) and (isinstance(left, LiteralType) or isinstance(right, LiteralType)):
            values = tuple(
                (left.values if isinstance(left, LiteralType) else ())
                + (right.values if isinstance(right, LiteralType) else ())
            )
            return LiteralType(values)
        return self._binop(e.op, left, right)

    def _binop(self, op: ast.operator, left: Any, right: Any) -> Any:
        fn = _BINOPS.get(type(op))
        if fn is None or not known(left) or not known(right):
            return UNKNOWN
        if not all(isinstance(v, (int, float, str, tuple, list, set, frozenset)) for v in (left, right)):
            return UNKNOWN
        try:
            return fn(left, right)
        except Exception:  # noqa: BLE001 - division by zero or a type mismatch: the value is simply not known
            return UNKNOWN

    def _e_IfExp(self, e: ast.IfExp, frame: Frame, state: State) -> Any:
        truth = self.truth(self.eval(e.test, frame, state), frame, state)
        if truth is True:
            return self.eval(e.body, frame, state)
        if truth is False:
            return self.eval(e.orelse, frame, state)
        a, b = self.eval(e.body, frame, state), self.eval(e.orelse, frame, state)
        return a if _same(a, b) else UNKNOWN

    def _e_NamedExpr(self, e: ast.NamedExpr, frame: Frame, state: State) -> Any:
        value = self.eval(e.value, frame, state)
        self.assign(e.target, value, frame, state, e)
        return value

    def _e_Subscript(self, e: ast.Subscript, frame: Frame, state: State) -> Any:
        base = self.eval(e.value, frame, state)
        if isinstance(base, Opaque) and base.name.rpartition(".")[2] == "Literal":
            elts = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            values: list[Any] = []
            for elt in elts:
                v = self.eval(elt, frame, state)
                values.extend(v.values if isinstance(v, LiteralType) else [v])
            return LiteralType(tuple(values))
        if isinstance(base, Opaque) and base.name.rpartition(".")[2] in ("Annotated", "ClassVar", "Final"):
            first = e.slice.elts[0] if isinstance(e.slice, ast.Tuple) else e.slice
            return self.eval(first, frame, state)
        if isinstance(e.slice, ast.Slice):
            return UNKNOWN
        key = self.eval(e.slice, frame, state)
        if isinstance(base, ClassRef) and self.is_enum(base.info):
            if not isinstance(key, str):
                return UNKNOWN
            if key in self.enum_members(base.info):
                return EnumMember(base.info, key)
            self.record("raise", frame.module, e, f"KeyError: {key!r} is not a member of {base.info.name}", state.path)
            return UNKNOWN
        if not known(key):
            return UNKNOWN
        if isinstance(base, dict):
            return base.get(key, UNKNOWN)
        if isinstance(base, (list, tuple, str)) and isinstance(key, int) and -len(base) <= key < len(base):
            return base[key]
        return UNKNOWN

    def _e_Compare(self, e: ast.Compare, frame: Frame, state: State) -> Any:
        left = self.eval(e.left, frame, state)
        result: Any = True
        for op, comparator in zip(e.ops, e.comparators, strict=True):
            right = self.eval(comparator, frame, state)
            outcome = self.compare(op, left, right)
            if outcome is False:
                return False
            if outcome is UNKNOWN:
                result = UNKNOWN
            left = right
        return result

    def _e_Lambda(self, e: ast.Lambda, frame: Frame, state: State) -> Any:
        return Function(frame.module, e, None, dict(state.locals))

    def _comprehension(self, e: ast.ListComp | ast.SetComp | ast.GeneratorExp, frame: Frame, state: State) -> Any:
        if len(e.generators) != 1 or e.generators[0].is_async:
            return UNKNOWN
        gen = e.generators[0]
        items = self._iterate(self.eval(gen.iter, frame, state))
        if items is None:
            return UNKNOWN
        out: list[Any] = []
        inner = state.copy()
        for item in items:
            self.assign(gen.target, item, frame, inner, e)
            keep: Any = True
            for cond in gen.ifs:
                truth = self.truth(self.eval(cond, frame, inner), frame, inner)
                if truth is UNKNOWN:
                    return UNKNOWN
                keep = keep and truth
            if keep:
                out.append(self.eval(e.elt, frame, inner))
        return out

    _e_ListComp = _comprehension
    _e_GeneratorExp = _comprehension

    def _e_SetComp(self, e: ast.SetComp, frame: Frame, state: State) -> Any:
        values = self._comprehension(e, frame, state)
        try:
            return set(values) if isinstance(values, list) else UNKNOWN
        except TypeError:
            return UNKNOWN

    def _e_Call(self, e: ast.Call, frame: Frame, state: State) -> Any:
        func = self.eval(e.func, frame, state)
        args: list[Any] = []
        for arg in e.args:
            if isinstance(arg, ast.Starred):
                items = self._iterate(self.eval(arg.value, frame, state))
                if items is None:
                    args.append(_STAR_UNKNOWN)
                else:
                    args.extend(items)
            else:
                args.append(self.eval(arg, frame, state))
        kwargs: dict[str, Any] = {}
        for kw in e.keywords:
            value = self.eval(kw.value, frame, state)
            if kw.arg is None:
                if isinstance(value, dict) and all(isinstance(k, str) for k in value):
                    kwargs.update(value)
                else:
                    kwargs[_STAR_KWARGS] = UNKNOWN
            else:
                kwargs[kw.arg] = value
        if self.hook is not None:
            handled = self.hook(self, func, args, kwargs, e, frame, state)
            if handled is not NOT_HANDLED:
                return handled
        if isinstance(e.func, ast.Attribute) and e.func.attr.startswith("warn"):
            # `logger.warning(...)`, `logger.warning_once(...)`, `warnings.warn(...)`: whatever the logger is.
            self.record("warning", frame.module, e, message_of(e), state.path)
            return None
        if id(e) in self.watch_calls:
            self.record("call", frame.module, e, "", state.path, (func, args, kwargs))
            return UNKNOWN  # the caller only wants to know the call happens, and with what
        return self.call(func, args, kwargs, e, frame, state)

    # -- calls --------------------------------------------------------------------------------------------------

    def call(
        self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        if isinstance(func, Bound):
            return self._invoke(func.func, func.self_value, args, kwargs, state, frame.depth + 1)
        if isinstance(func, Function):
            return self._invoke(func, None, args, kwargs, state, frame.depth + 1)
        if isinstance(func, PyMethod):
            return self._py_method(func, args, kwargs)
        if isinstance(func, Opaque):
            return self._builtin(func.name, args, kwargs, node, frame, state)
        if isinstance(func, ClassRef):
            if self.is_enum(func.info) and len(args) == 1 and not kwargs:
                return self.enum_by_value(func.info, args[0])
            return UNKNOWN
        return UNKNOWN

    def _invoke(
        self,
        func: Function,
        self_value: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        state: State,
        depth: int,
        force: bool = False,
    ) -> Any:
        if not force and (depth > self.max_depth or _is_generator(func.node)):
            return UNKNOWN
        bindings = self.bind(func, self_value, args, kwargs, depth)
        inner = State(bindings, state.writes, state.path)
        frame = Frame(func.module, func.owner, func.closure, depth)
        if isinstance(func.node, ast.Lambda):
            return self.eval(func.node.body, frame, inner)
        try:
            flow = self.exec_block(func.node.body, frame, inner)
        except RecursionError:
            return UNKNOWN
        ends = [(s, v) for s, v in flow.returns]
        if flow.normal is not None:
            ends.append((flow.normal, None))
        if not ends:
            return UNKNOWN
        end_writes = merge([State({}, s.writes, s.path) for s, _ in ends])
        if end_writes is not None:
            state.writes.clear()
            state.writes.update(end_writes.writes)
        first = ends[0][1]
        return first if all(_same(first, v) for _, v in ends[1:]) else UNKNOWN

    def bind(
        self, func: Function, self_value: Any, args: list[Any], kwargs: dict[str, Any], depth: int
    ) -> dict[str, Any]:
        spec = func.node.args
        positional = [*spec.posonlyargs, *spec.args]
        values = list(args)
        if self_value is not None and not _is_static(func.node):
            values.insert(0, self_value)
        out: dict[str, Any] = {}
        unknown_rest = _STAR_UNKNOWN in values
        values = [v for v in values if v is not _STAR_UNKNOWN]
        defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
        for i, param in enumerate(positional):
            if i < len(values):
                out[param.arg] = values[i]
            elif param.arg in kwargs:
                out[param.arg] = kwargs[param.arg]
            elif unknown_rest or _STAR_KWARGS in kwargs:
                out[param.arg] = UNKNOWN
            elif defaults[i] is not None:
                out[param.arg] = self._default(defaults[i], func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.vararg is not None:
            out[spec.vararg.arg] = UNKNOWN if unknown_rest else tuple(values[len(positional) :])
        for param, default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if param.arg in kwargs:
                out[param.arg] = kwargs[param.arg]
            elif default is not None and _STAR_KWARGS not in kwargs:
                out[param.arg] = self._default(default, func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.kwarg is not None:
            named = {p.arg for p in [*positional, *spec.kwonlyargs]}
            extra = {k: v for k, v in kwargs.items() if k not in named}
            out[spec.kwarg.arg] = UNKNOWN if _STAR_KWARGS in kwargs else extra
        return out

    def _default(self, expr: ast.expr, func: Function, depth: int) -> Any:
        return self.eval(expr, Frame(func.module, func.owner, func.closure, depth), State({}, {}, frozenset()))

    def _py_method(self, method: PyMethod, args: list[Any], kwargs: dict[str, Any]) -> Any:
        target = method.target
        if not known(args) or not known(kwargs) or (isinstance(target, str) and not known(target)):
            if method.name in ("append", "extend", "update", "add", "insert") and isinstance(target, (list, dict)):
                return None  # mutating with an unknown value: the container stays, its new part is unknown
            return UNKNOWN
        try:
            result = getattr(target, method.name)(*args, **kwargs)
        except Exception:  # noqa: BLE001 - e.g. list.remove of a missing value: no effect we can model
            return UNKNOWN
        if isinstance(result, (type({}.items()), type({}.keys()), type({}.values()))):
            return list(result)
        return result

    def _builtin(
        self, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        short = name.rpartition(".")[2]
        if name.startswith("builtins."):
            return self._python_builtin(short, args, kwargs, node, frame, state)
        if short == "get_args" and len(args) == 1:
            value = args[0]
            return value.values if isinstance(value, LiteralType) else UNKNOWN
        if short == "cast" and len(args) == 2:
            return args[1]
        return UNKNOWN

    def _python_builtin(
        self, short: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        if short == "getattr" and len(args) in (2, 3) and isinstance(args[1], str):
            value = self.getattr(args[0], args[1], state, frame.depth, missing=_MISSING)
            if value is _MISSING:
                return args[2] if len(args) == 3 else UNKNOWN
            return value
        if short == "hasattr" and len(args) == 2 and isinstance(args[1], str):
            value = self.getattr(args[0], args[1], state, frame.depth, missing=_MISSING)
            return UNKNOWN if value is UNKNOWN else value is not _MISSING
        if short == "isinstance" and len(args) == 2:
            return self._isinstance(args[0], args[1])
        if short == "super":
            if frame.owner is not None and "self" in state.locals:
                return SuperRef(frame.owner, state.locals["self"])
            if frame.owner is not None and "cls" in state.locals:
                return SuperRef(frame.owner, state.locals["cls"])
            return UNKNOWN
        if short in ("any", "all") and len(args) == 1:
            items = args[0] if isinstance(args[0], (list, tuple, set)) else None
            if items is None:
                return UNKNOWN
            truths = [self.truth(v, frame, state) for v in items]
            if short == "any":
                return True if True in truths else (UNKNOWN if UNKNOWN in truths else False)
            return False if False in truths else (UNKNOWN if UNKNOWN in truths else True)
        if short == "type":
            return UNKNOWN
        if not known(args) or not known(kwargs):
            return UNKNOWN
        fn = {
            "len": len,
            "min": min,
            "max": max,
            "sorted": sorted,
            "list": list,
            "tuple": tuple,
            "set": set,
            "frozenset": frozenset,
            "dict": dict,
            "int": int,
            "str": str,
            "float": float,
            "bool": bool,
            "abs": abs,
            "sum": sum,
            "repr": repr,
        }.get(short)
        if fn is None:
            return UNKNOWN
        if any(isinstance(a, (Obj, ClassRef, EnumMember, Function, Bound, Opaque)) for a in args):
            return UNKNOWN
        try:
            return fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a builtin refusing its input: the value is not known
            return UNKNOWN

    def _isinstance(self, value: Any, types: Any) -> Any:
        options = list(types) if isinstance(types, tuple) else [types]
        if value is UNKNOWN:
            return UNKNOWN
        for t in options:
            if isinstance(t, Opaque) and t.name.startswith("builtins."):
                pytype = _PYTYPES.get(t.name.rpartition(".")[2])
                if pytype is None:
                    return UNKNOWN
                if isinstance(value, (Obj, EnumMember, ClassRef, Function, Bound)):
                    continue
                if isinstance(value, pytype) and not (pytype is int and isinstance(value, bool)):
                    return True
            elif isinstance(t, ClassRef):
                cls = value.cls if isinstance(value, (Obj, EnumMember)) else None
                if cls is None:
                    if isinstance(value, (str, int, float, bool, dict, list, tuple, type(None))):
                        continue
                    return UNKNOWN
                if any(a.key == t.info.key for a in self.tree.ancestors(cls)):
                    return True
            else:
                return UNKNOWN
        return False

    # -- attributes and names -----------------------------------------------------------------------------------

    def getattr(self, base: Any, attr: str, state: State, depth: int, missing: Any = UNKNOWN) -> Any:
        if base is UNKNOWN:
            return UNKNOWN
        if isinstance(base, Obj):
            key = (id(base), attr)
            if key in state.writes:
                return state.writes[key]
            if attr in base.fields:
                return base.fields[attr]
            if base.cls is None:
                return UNKNOWN
            return self._class_member(
                base.cls, attr, base, state, depth, instance=True, missing=missing, defaults=base.defaults
            )
        if isinstance(base, ClassRef):
            if self.is_enum(base.info) and attr in self.enum_members(base.info):
                return EnumMember(base.info, attr)
            return self._class_member(
                base.info, attr, base, state, depth, instance=False, missing=missing, defaults=True
            )
        if isinstance(base, EnumMember):
            if attr == "name":
                return base.name
            if attr == "value":
                return self.enum_value(base)
            return self._class_member(
                base.cls, attr, base, state, depth, instance=True, missing=missing, defaults=False
            )
        if isinstance(base, SuperRef):
            cls = (
                base.self_value.cls
                if isinstance(base.self_value, Obj)
                else (base.self_value.info if isinstance(base.self_value, ClassRef) else None)
            )
            if cls is None:
                return UNKNOWN
            chain = self.tree.ancestors(cls)
            after = [
                c
                for i, c in enumerate(chain)
                if i > next((j for j, k in enumerate(chain) if k == base.owner), len(chain))
            ]
            for klass in after:
                if attr in klass.methods:
                    return self._method_value(klass, klass.methods[attr], base.self_value, state, depth)
            return UNKNOWN
        if isinstance(base, ModuleRef):
            return self._resolved(base.name, attr)
        if isinstance(base, Token):
            return TokenAttr(base, attr)
        if isinstance(base, Opaque):
            return Opaque(f"{base.name}.{attr}")
        if isinstance(base, str) and attr in _PURE_STR:
            return PyMethod(base, attr)
        if isinstance(base, dict) and attr in _DICT:
            return PyMethod(base, attr)
        if isinstance(base, list) and attr in _LIST:
            return PyMethod(base, attr)
        if isinstance(base, set) and attr in _SET:
            return PyMethod(base, attr)
        return missing if missing is not UNKNOWN and base is None else UNKNOWN

    def _class_member(
        self,
        cls: ClassInfo,
        attr: str,
        owner_value: Any,
        state: State,
        depth: int,
        *,
        instance: bool,
        missing: Any,
        defaults: bool,
    ) -> Any:
        for klass in self.tree.ancestors(cls):
            if attr in klass.methods:
                return self._method_value(klass, klass.methods[attr], owner_value, state, depth)
            if attr in klass.attributes:
                module = self.tree.module(klass.module)
                if module is None or (not defaults and not _is_classvar(klass.annotations.get(attr))):
                    return UNKNOWN
                value = _field_default(klass.attributes[attr])
                if value is None:
                    return UNKNOWN
                return self.eval(value, Frame(module, klass, None, depth), State({}, {}, frozenset()))
            if attr in klass.annotations:
                return UNKNOWN  # a declared field without a class-level value
        return missing

    def _method_value(
        self, klass: ClassInfo, node: ast.FunctionDef | ast.AsyncFunctionDef, owner_value: Any, state: State, depth: int
    ) -> Any:
        module = self.tree.module(klass.module)
        if module is None:
            return UNKNOWN
        func = Function(module, node, klass)
        decorators = {dotted(d) or "" for d in node.decorator_list}
        names = {d.rpartition(".")[2] for d in decorators}
        if names & {"property", "cached_property"}:
            if isinstance(owner_value, ClassRef):
                return UNKNOWN
            return self._invoke(func, owner_value, [], {}, state, depth + 1)
        if "staticmethod" in names:
            return func
        if "classmethod" in names or "field_validator" in names or "model_validator" in names:
            owner = (
                owner_value
                if isinstance(owner_value, ClassRef)
                else (
                    ClassRef(owner_value.cls)
                    if isinstance(owner_value, (Obj, EnumMember)) and owner_value.cls
                    else ClassRef(klass)
                )
            )
            return Bound(func, owner)
        if isinstance(owner_value, ClassRef):
            return func  # an unbound method reached through the class
        return Bound(func, owner_value)

    def module_value(self, module: ParsedModule, name: str) -> Any:
        shadowed = name in module.assigns or name in module.functions or name in module.imports
        if name in _BUILTINS and not shadowed and name not in module.classes:
            return Opaque(f"builtins.{name}")
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        return self._resolved(module.name, name)

    def _resolved(self, module: str, name: str) -> Any:
        key = (module, name)
        if key in self._module_values:
            return self._module_values[key]
        if key in self._resolving:
            return UNKNOWN
        self._resolving.add(key)
        try:
            value = self._resolve_uncached(module, name)
        finally:
            self._resolving.discard(key)
        self._module_values[key] = value
        return value

    def _resolve_uncached(self, module: str, name: str) -> Any:
        found = self.tree.resolve(module, name)
        if isinstance(found, ClassInfo):
            return ClassRef(found)
        if isinstance(found, str):
            return ModuleRef(found) if found.startswith(self.tree.package) else Opaque(found)
        if isinstance(found, tuple):
            parsed, node = found
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return Function(parsed, node)
            frame = Frame(parsed, None, None, 0)
            return self.eval(node, frame, State({}, {}, frozenset()))
        parsed = self.tree.module(module)
        if parsed is not None and name in parsed.imports:
            src, orig = parsed.imports[name]
            if not src.startswith(self.tree.package):
                return Opaque(f"{src}.{orig}")
        if parsed is not None and name in parsed.module_imports:
            target = parsed.module_imports[name]
            return ModuleRef(target) if target.startswith(self.tree.package) else Opaque(target)
        if self.tree.file_of(f"{module}.{name}") is not None:
            return ModuleRef(f"{module}.{name}")
        return UNKNOWN

    # -- enums --------------------------------------------------------------------------------------------------

    def is_enum(self, cls: ClassInfo) -> bool:
        return bool(self.tree.base_names(cls) & {"Enum", "IntEnum", "StrEnum", "enum.Enum", "Flag"})

    def enum_members(self, cls: ClassInfo) -> list[str]:
        return [n for n in cls.attributes if not n.startswith("_") and n not in cls.methods]

    def enum_value(self, member: EnumMember) -> Any:
        expr = member.cls.attributes.get(member.name)
        if expr is None:
            return UNKNOWN
        module = self.tree.module(member.cls.module)
        if module is None:
            return UNKNOWN
        # Members may name earlier members (`FULL_DECODE_ONLY = (FULL, NONE)`): they mean their values there.
        siblings = {n: UNKNOWN for n in self.enum_members(member.cls)}
        state = State({}, {}, frozenset())
        for name in self.enum_members(member.cls):
            if name == member.name:
                break
            value = member.cls.attributes[name]
            siblings[name] = self.eval(value, Frame(module, member.cls, siblings, 0), state)
        return self.eval(expr, Frame(module, member.cls, siblings, 0), state)

    def enum_by_value(self, cls: ClassInfo, value: Any) -> Any:
        if isinstance(value, EnumMember) and value.cls == cls:
            return value
        if not known(value):
            return UNKNOWN
        for name in self.enum_members(cls):
            if _same(self.enum_value(EnumMember(cls, name)), value):
                return EnumMember(cls, name)
        return UNKNOWN

    # -- comparisons and truth ----------------------------------------------------------------------------------

    def compare(self, op: ast.cmpop, left: Any, right: Any) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot)):
            same = self._identical(left, right)
            if same is UNKNOWN:
                return UNKNOWN
            return same if isinstance(op, ast.Is) else not same
        if isinstance(op, (ast.Eq, ast.NotEq)):
            equal = self.equal(left, right)
            if equal is UNKNOWN:
                return UNKNOWN
            return equal if isinstance(op, ast.Eq) else not equal
        if isinstance(op, (ast.In, ast.NotIn)):
            inside = self._contains(right, left)
            if inside is UNKNOWN:
                return UNKNOWN
            return inside if isinstance(op, ast.In) else not inside
        fn = _ORDER.get(type(op))
        if fn is None or not known(left) or not known(right):
            return UNKNOWN
        if not all(isinstance(v, (int, float)) for v in (left, right)):
            return UNKNOWN
        return fn(left, right)

    def _identical(self, a: Any, b: Any) -> Any:
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
            return a is b
        if isinstance(a, EnumMember) and isinstance(b, EnumMember):
            return a == b
        if isinstance(a, Obj) or isinstance(b, Obj):
            return a is b
        if isinstance(a, ClassRef) and isinstance(b, ClassRef):
            return a.info == b.info
        return UNKNOWN

    def equal(self, a: Any, b: Any) -> Any:
        if not known(a) or not known(b):
            return UNKNOWN
        if isinstance(a, EnumMember) or isinstance(b, EnumMember):
            if isinstance(a, EnumMember) and isinstance(b, EnumMember):
                return a == b
            member, other = (a, b) if isinstance(a, EnumMember) else (b, a)
            if self.tree.base_names(member.cls) & {"str", "int", "StrEnum", "IntEnum"}:
                return self.equal(self.enum_value(member), other)
            return False
        if isinstance(a, Obj) or isinstance(b, Obj):
            if a is b:
                return True
            obj = a if isinstance(a, Obj) else b
            if obj.cls is not None and self.tree.method(obj.cls, "__eq__") is not None:
                return UNKNOWN
            return False
        if isinstance(a, (ClassRef, Function, Bound, Opaque, ModuleRef, LiteralType, SuperRef, PyMethod)):
            return a == b
        if isinstance(b, (ClassRef, Function, Bound, Opaque, ModuleRef, LiteralType, SuperRef, PyMethod)):
            return False
        try:
            return bool(a == b)
        except Exception:  # noqa: BLE001 - values whose comparison fails: not decided
            return UNKNOWN

    def _contains(self, container: Any, item: Any) -> Any:
        if isinstance(container, str) and isinstance(item, str):
            return item in container
        if isinstance(container, LiteralType):
            container = list(container.values)
        if isinstance(container, dict):
            container = list(container.keys())
        if not isinstance(container, (list, tuple, set, frozenset)):
            return UNKNOWN
        undecided = False
        for element in container:
            eq = self.equal(element, item)
            if eq is True:
                return True
            if eq is UNKNOWN:
                undecided = True
        return UNKNOWN if undecided else False

    def truth(self, value: Any, frame: Frame, state: State) -> Any:
        if value is UNKNOWN:
            return UNKNOWN
        if isinstance(value, (Obj, EnumMember)):
            cls = value.cls
            if cls is None:
                return True
            found = self.tree.method(cls, "__bool__") or self.tree.method(cls, "__len__")
            if found is None:
                return True
            module = self.tree.module(found[1].module)
            if module is None or found[0].name != "__bool__":
                return UNKNOWN
            result = self._invoke(Function(module, found[0], found[1]), value, [], {}, state, frame.depth + 1)
            return UNKNOWN if result is UNKNOWN else bool(result) if known(result) else UNKNOWN
        if isinstance(value, (ClassRef, Function, Bound, Opaque, ModuleRef, LiteralType, SuperRef, PyMethod)):
            return True
        if isinstance(value, _CONTAINERS):
            return len(value) > 0
        try:
            return bool(value)
        except Exception:  # noqa: BLE001 - an evaluated value without a truth value: undecided
            return UNKNOWN

    # -- outcomes -----------------------------------------------------------------------------------------------

    def record(
        self, kind: str, module: ParsedModule, node: ast.AST, message: str, path: frozenset, detail: Any = None
    ) -> None:
        self.outcomes.append(Outcome(Site(kind, module, node, message), path, detail))


_MISSING: Any = object()
_STAR_UNKNOWN: Any = object()
_STAR_KWARGS = "\0**"


def _is_static(node: ast.AST) -> bool:
    return any((dotted(d) or "").endswith("staticmethod") for d in getattr(node, "decorator_list", []))


def _field_default(value: ast.expr) -> ast.expr | None:
    """A class-level value as a dataclass field's default: `field(default=x)` / `Field(x)` mean x; a default
    factory means "computed" (None here)."""
    if isinstance(value, ast.Call) and (dotted(value.func) or "").rpartition(".")[2] in ("field", "Field"):
        for kw in value.keywords:
            if kw.arg == "default":
                return kw.value
        if value.args and not isinstance(value.args[0], ast.Starred):
            return value.args[0]
        return None
    return value


def _is_classvar(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _is_generator(node: ast.AST) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    return any(isinstance(sub, (ast.Yield, ast.YieldFrom)) for sub in ast.walk(node))


def _as_load(target: ast.expr) -> ast.expr:
    return target


def _chain(first: Flow, second: Flow) -> Flow:
    return Flow(
        normal=second.normal,
        returns=first.returns + second.returns,
        breaks=first.breaks + second.breaks,
        continues=first.continues + second.continues,
    )


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names


# -- verdicts over outcomes ---------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """Whether a set of outcomes happens for the config: True, False, or UNKNOWN with the conditions why."""

    value: Any
    outcomes: list[Outcome]
    conditions: list[Cond] = field(default_factory=list)

    @property
    def certain(self) -> bool:
        return self.value is True

    def reasons(self, limit: int = 3) -> str:
        shown = [c.describe() for c in self.conditions[:limit]]
        more = len(self.conditions) - limit
        return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def verdict(outcomes: list[Outcome]) -> Verdict:
    """True if some outcome happens whatever the undecided conditions are, UNKNOWN if some may, else False."""
    live = [o for o in outcomes if not _contradictory(o.path)]
    if not live:
        return Verdict(False, [])
    certain = [o for o in live if not o.path]
    if certain:
        return Verdict(True, certain)
    conds: list[Cond] = []
    for o in live:
        for cond, _ in sorted(o.path, key=lambda item: (item[0].relpath, getattr(item[0].node, "lineno", 0))):
            if cond not in conds:
                conds.append(cond)
    if len(conds) <= 12 and _covers(live, conds):
        return Verdict(True, live)
    return Verdict(UNKNOWN, live, conds)


def _contradictory(path: frozenset) -> bool:
    seen: dict[Cond, bool] = {}
    for cond, polarity in path:
        if seen.get(cond, polarity) != polarity:
            return True
        seen[cond] = polarity
    return False


def _covers(outcomes: list[Outcome], conds: list[Cond]) -> bool:
    """Every assignment of the undecided conditions satisfies some outcome's path (their union is certain)."""
    for values in itertools.product((True, False), repeat=len(conds)):
        assignment = dict(zip(conds, values, strict=True))
        if not any(all(assignment[c] == p for c, p in o.path) for o in outcomes):
            return False
    return True
