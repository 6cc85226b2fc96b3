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
import operator
from collections.abc import Callable, Iterable
from typing import Any

from specguard.analysis.ast_tools import absolute_module
from specguard.deploy.flow.join import merge
from specguard.deploy.flow.objects import ObjectModel
from specguard.deploy.source import SourceTree, message_of
from specguard.evaluation import environment, exceptions
from specguard.evaluation.budget import (
    EVALUATION_STEPS,
    OutOfBudget,
    deep_size,
    evaluation_budget,
    result_size,
    too_large,
)
from specguard.evaluation.evaluator import STAR_KWARGS, assigned_names, chain, is_static, own_nodes
from specguard.evaluation.paths import Cond, Flow, Frame, Outcome, State
from specguard.evaluation.values import (
    NOT_HANDLED,
    UNKNOWN,
    Bound,
    ClassRef,
    EnumMember,
    Function,
    LiteralType,
    ModuleRef,
    Obj,
    Opaque,
    PyMethod,
    known,
    same_value,
)

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

_STAR_UNKNOWN: Any = object()


class Evaluator(ObjectModel):
    """Evaluates functions of one source tree; outcomes of every run accumulate in `outcomes`."""

    def __init__(
        self,
        tree: SourceTree,
        *,
        hook: Callable[..., Any] | None = None,
        watch_calls: Iterable[ast.AST] = (),
        watch_attrs: Iterable[str] = (),
        max_depth: int = 4,
        max_steps: int = EVALUATION_STEPS,
        track_returns: bool = False,
    ) -> None:
        self.tree = tree
        self.hook = hook
        self.watch_calls = {id(n) for n in watch_calls}
        self.watch_attrs = set(watch_attrs)
        self.max_depth = max_depth
        self.budget = evaluation_budget(max_steps)
        self.outcomes: list[Outcome] = []
        self.track_returns = track_returns
        self._top_returns: set[int] = set()  # the `return` statements of the function `call_function` runs
        self._conds: dict[tuple[int, str], Cond] = {}
        self._module_values: dict[tuple[str, str], Any] = {}
        self._module_reads: dict[tuple[str, str], list[str]] = {}
        self._resolving: set[tuple[str, str]] = set()
        self._reraise: list[list[Outcome]] = []  # what the handler being run caught (for a bare `raise`)
        self.env = environment.current()
        self.quiet = 0  # > 0 while a module-level value is computed: its branches decide no verdict

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
        if self.track_returns:
            self._top_returns = {id(n) for n in _own_returns(func.node)}
        value = self._invoke(func, self_value, args, kwargs, state, depth, force=True)
        return value, state

    def exec_block(self, stmts: list[ast.stmt], frame: Frame, state: State) -> Flow:
        flow = Flow()
        current: State | None = state
        for stmt in stmts:
            if current is None:
                break
            self.budget.step()
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
            mark = len(self.env.log)
            value = self.eval(stmt.value, frame, state)
            for target in stmt.targets:
                self.assign(target, value, frame, state, stmt)
                self._carry_env(target, stmt.value, state, mark)
            return Flow(normal=state)
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                mark = len(self.env.log)
                self.assign(stmt.target, self.eval(stmt.value, frame, state), frame, state, stmt)
                self._carry_env(stmt.target, stmt.value, state, mark)
            return Flow(normal=state)
        if isinstance(stmt, ast.AugAssign):
            mark = len(self.env.log)
            current = self.eval(stmt.target, frame, state)
            value = self._binop(stmt.op, current, self.eval(stmt.value, frame, state))
            self.assign(stmt.target, value, frame, state, stmt)
            self._carry_env(stmt.target, stmt, state, mark)
            return Flow(normal=state)
        if isinstance(stmt, ast.If):
            return self._branch(stmt.test, stmt.body, stmt.orelse, frame, state)
        if isinstance(stmt, ast.Return):
            value = self.eval(stmt.value, frame, state) if stmt.value is not None else None
            if id(stmt) in self._top_returns:  # what the function `call_function` runs returns
                self.record("return", frame.module, stmt, "", state.path, value)
            return Flow(returns=[(state, value)])
        if isinstance(stmt, ast.Raise):
            # Recorded, and evaluation goes on as if it had not fired: each validation is judged on its own
            # (a value this evaluation holds stale, e.g. one an uninlined call would have set, must not make an
            # unrelated raise hide the rest of the function).
            if stmt.exc is not None:
                self.record("raise", frame.module, stmt, message_of(stmt.exc), state.path)
            elif self._reraise:  # a bare `raise` in a handler: what it caught fails again, on this path
                for caught in self._reraise[-1]:
                    self.outcomes.append(Outcome(caught.site, caught.path | state.path, caught.detail))
            return Flow(normal=state)
        if isinstance(stmt, ast.Assert):
            truth = self.test(stmt.test, frame, state)
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
            start = len(self.outcomes)
            flow = self.exec_block(stmt.body, frame, state)  # type: ignore[attr-defined]
            flow = self._handle(stmt.handlers, self.outcomes[start:], flow, frame, state)  # type: ignore[attr-defined]
            if flow.normal is not None:
                rest = self.exec_block(stmt.orelse, frame, flow.normal)  # type: ignore[attr-defined]
                flow = chain(flow, rest)
            if flow.normal is not None and stmt.finalbody:  # type: ignore[attr-defined]
                flow = chain(flow, self.exec_block(stmt.finalbody, frame, flow.normal))  # type: ignore[attr-defined]
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
        for name in assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        return Flow(normal=state)

    def _handle(
        self, handlers: list[ast.ExceptHandler], raised: list[Outcome], flow: Flow, frame: Frame, state: State
    ) -> Flow:
        """Mark the raises of a try body its handlers catch (under a condition where a handler is undecided), and
        run each handler that catches something on the paths of what it caught."""
        if not handlers:
            return flow
        runs: list[tuple[ast.ExceptHandler, list[Outcome]]] = [(h, []) for h in handlers]
        for outcome in raised:
            if outcome.site.kind not in ("raise", "assert") or outcome.caught:
                continue
            types = exceptions.lineage(outcome, self.tree)
            for handler, caught in runs:
                match = exceptions.catches(handler, types)
                if match is False:
                    continue
                if match is True:
                    outcome.caught = True
                    caught.append(outcome)
                    break
                cond = self.cond(handler.type or handler, frame.module)  # "this handler catches it"
                caught.append(Outcome(outcome.site, outcome.path | {(cond, True)}, outcome.detail))
                outcome.path = outcome.path | {(cond, False)}
        ends = [flow.normal] if flow.normal is not None else []
        for handler, caught in runs:
            for path in list(dict.fromkeys(o.path for o in caught))[:4]:
                inner = (flow.normal or state).copy(path, self.budget)
                if handler.name:
                    inner.locals[handler.name] = UNKNOWN
                group = [o for o in caught if o.path == path]
                self._reraise.append(group)
                before = len(self.outcomes)
                try:
                    res = self.exec_block(handler.body, frame, inner)
                finally:
                    self._reraise.pop()
                self._raised_again(group, self.outcomes[before:])
                flow = Flow(flow.normal, flow.returns + res.returns, flow.breaks + res.breaks, flow.continues)
                if res.normal is not None:
                    res.normal.path = state.path if flow.normal is None else flow.normal.path
                    ends.append(res.normal)
        return Flow(merge(ends, self.budget), flow.returns, flow.breaks, flow.continues)

    def _raised_again(self, caught: list[Outcome], handled: list[Outcome]) -> None:
        """A handler that raises (`raise Other(...) from exc`, or a failing assert) fails again on that path: what it
        caught is a failure there, under another name. A bare `raise` was already counted (see `_reraise`)."""
        sites = {id(o.site) for o in caught}
        for again in handled:
            if again.site.kind in ("raise", "assert") and not again.caught and id(again.site) not in sites:
                self.outcomes += [Outcome(o.site, o.path | again.path, o.detail) for o in caught]

    def _branch(self, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame, state: State) -> Flow:
        truth = self.test(test, frame, state)
        if truth is True:
            return self.exec_block(body, frame, state)
        if truth is False:
            return self.exec_block(orelse, frame, state)
        cond = self.cond(test, frame.module)
        if (cond, True) in state.path:
            return self.exec_block(body, frame, state)
        if (cond, False) in state.path:
            return self.exec_block(orelse, frame, state)
        yes = self.exec_block(body, frame, state.copy(state.path | {(cond, True)}, self.budget))
        no = self.exec_block(orelse, frame, state.copy(state.path | {(cond, False)}, self.budget))
        return self._join(yes, no)

    def test(self, test: ast.expr, frame: Frame, state: State) -> Any:
        """The truth of a branch's test. One the serving environment decides is remembered there: the variables
        read while evaluating it, or that the locals it reads were computed from (see `environment`)."""
        mark = len(self.env.log)
        truth = self.truth(self.eval(test, frame, state), frame, state)
        if truth is not UNKNOWN and not self.quiet:
            self.env.decide([*self.env.log[mark:], *_env_of(test, state)])
        return truth

    def _carry_env(self, target: ast.expr, value: ast.AST, state: State, mark: int) -> None:
        """What a local assigned here was computed from: the variables read meanwhile, and those of the locals read."""
        names = frozenset([*self.env.log[mark:], *_env_of(value, state)])
        for name in _bound_names(target):
            if names:
                state.env[name] = names
            else:
                state.env.pop(name, None)

    def _join(self, yes: Flow, no: Flow) -> Flow:
        normals = [f.normal for f in (yes, no) if f.normal is not None]
        return Flow(
            normal=merge(normals, self.budget),
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
            current = merge([s for s in [res.normal, *res.continues] if s is not None], self.budget)
        if current is not None and not broke:
            res = self.exec_block(stmt.orelse, frame, current)
            flow.returns += res.returns
            current = res.normal
        flow.normal = merge([s for s in [current, *broke] if s is not None], self.budget)
        return flow

    def _loop_unknown(self, stmt: ast.stmt, over: ast.expr, body: list[ast.stmt], frame: Frame, state: State) -> Flow:
        for name in assigned_names(body) | assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        cond = self.cond(over, frame.module)  # "the loop body runs", named by what it iterates over
        res = self.exec_block(body, frame, state.copy(state.path | {(cond, True)}, self.budget))
        after = merge([s for s in [state, res.normal, *res.breaks, *res.continues] if s is not None], self.budget)
        if after is not None:
            after.path = state.path
            for name in assigned_names(body):
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
            self.budget.spend(len(value))
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

    def _local_import(self, stmt: ast.Import | ast.ImportFrom, frame: Frame, state: State) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.name if alias.asname else alias.name.split(".")[0]
                known_module = bound.startswith(self.tree.package)
                state.locals[alias.asname or bound] = ModuleRef(bound) if known_module else Opaque(bound)
            return
        source = absolute_module(frame.module.name, frame.module.is_package, stmt.level, stmt.module)
        for alias in stmt.names:
            if alias.name != "*":
                state.locals[alias.asname or alias.name] = self._resolved(source, alias.name)

    def eval(self, expr: ast.expr | None, frame: Frame, state: State) -> Any:
        if expr is None:
            return None
        self.budget.step()
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
        values = self._elements(e.elts, frame, state)
        return tuple(values) if values is not UNKNOWN else UNKNOWN

    def _e_List(self, e: ast.List, frame: Frame, state: State) -> Any:
        return self._elements(e.elts, frame, state)

    def _e_Set(self, e: ast.Set, frame: Frame, state: State) -> Any:
        values = self._elements(e.elts, frame, state)
        try:
            return set(values) if values is not UNKNOWN else UNKNOWN
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
                if too_large(len(out) + len(items)):
                    return UNKNOWN
                out.extend(items)
            else:
                out.append(self.eval(elt, frame, state))
        self.budget.spend(len(out) + 1)
        return out

    def _e_Dict(self, e: ast.Dict, frame: Frame, state: State) -> Any:
        out: dict[Any, Any] = {}
        for key, value in zip(e.keys, e.values, strict=True):
            if key is None:
                merged = self.eval(value, frame, state)
                if not isinstance(merged, dict):
                    return UNKNOWN
                if too_large(len(out) + len(merged)):
                    return UNKNOWN
                self.budget.spend(len(merged))
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
            chars = sum(map(len, parts)) + deep_size(inner)
            if too_large(chars):
                return UNKNOWN
            self.budget.spend(chars)
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
        if fn is None or not known(left, self.budget) or not known(right, self.budget):
            return UNKNOWN
        if not all(isinstance(v, (int, float, str, tuple, list, set, frozenset)) for v in (left, right)):
            return UNKNOWN
        cost = result_size(op, left, right)
        if cost is None:
            return UNKNOWN
        self.budget.spend(cost)
        try:
            return fn(left, right)
        except Exception:  # noqa: BLE001 - division by zero or a type mismatch: the value is simply not known
            return UNKNOWN

    def _e_IfExp(self, e: ast.IfExp, frame: Frame, state: State) -> Any:
        truth = self.test(e.test, frame, state)
        if truth is True:
            return self.eval(e.body, frame, state)
        if truth is False:
            return self.eval(e.orelse, frame, state)
        a, b = self.eval(e.body, frame, state), self.eval(e.orelse, frame, state)
        return a if same_value(a, b) else UNKNOWN

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
        if isinstance(base, ClassRef) and self.tree.is_enum(base.info):
            if not isinstance(key, str):
                return UNKNOWN
            if key in self.tree.enum_members(base.info):
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
        inner = state.copy(budget=self.budget)
        for item in items:
            self.budget.step()
            self.assign(gen.target, item, frame, inner, e)
            keep: Any = True
            for cond in gen.ifs:
                truth = self.truth(self.eval(cond, frame, inner), frame, inner)
                if truth is UNKNOWN:
                    return UNKNOWN
                keep = keep and truth
            if keep:
                out.append(self.eval(e.elt, frame, inner))
                self.budget.spend(1)
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
                    kwargs[STAR_KWARGS] = UNKNOWN
            else:
                kwargs[kw.arg] = value
        if self.hook is not None:
            handled = self.hook(self, func, args, kwargs, e, frame, state)
            if handled is not NOT_HANDLED:
                return handled
        if id(e) in self.watch_calls:
            self.record("call", frame.module, e, "", state.path, (func, args, kwargs))
            return UNKNOWN  # the caller only wants to know the call happens, and with what
        if isinstance(e.func, ast.Attribute) and e.func.attr.startswith("warn"):
            # `logger.warning(...)`, `logger.warning_once(...)`, `warnings.warn(...)`: whatever the logger is.
            self.record("warning", frame.module, e, message_of(e), state.path)
            return None
        return self.call(func, args, kwargs, e, frame, state)

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
            if self.tree.is_enum(func.info) and len(args) == 1 and not kwargs:
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
            raise OutOfBudget("the code is too deeply nested to evaluate") from None
        ends = [(s, v) for s, v in flow.returns]
        if flow.normal is not None:
            ends.append((flow.normal, None))
        if force and self.track_returns and flow.normal is not None:  # the implicit `return None` at its end
            self.record("return", func.module, func.node, "", flow.normal.path, None)
        if not ends:
            return UNKNOWN
        end_writes = merge([State({}, s.writes, s.path) for s, _ in ends], self.budget)
        if end_writes is not None and end_writes.writes is not state.writes:  # one path shares the caller's writes
            state.writes.clear()
            state.writes.update(end_writes.writes)
        first = ends[0][1]
        return first if all(same_value(first, v) for _, v in ends[1:]) else UNKNOWN

    def bind(
        self, func: Function, self_value: Any, args: list[Any], kwargs: dict[str, Any], depth: int
    ) -> dict[str, Any]:
        spec = func.node.args
        positional = [*spec.posonlyargs, *spec.args]
        values = list(args)
        if self_value is not None and not is_static(func.node):
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
            elif unknown_rest or STAR_KWARGS in kwargs:
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
            elif default is not None and STAR_KWARGS not in kwargs:
                out[param.arg] = self._default(default, func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.kwarg is not None:
            named = {p.arg for p in [*positional, *spec.kwonlyargs]}
            extra = {k: v for k, v in kwargs.items() if k not in named}
            out[spec.kwarg.arg] = UNKNOWN if STAR_KWARGS in kwargs else extra
        return out


def _bound_names(target: ast.expr) -> list[str]:
    """The locals an assignment target binds (`a`, `a, *b`), not the objects it stores into (`a.x`, `a[i]`)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for elt in target.elts for name in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _env_of(node: ast.AST, state: State) -> list[str]:
    """The variables the locals `node` reads were computed from."""
    if not state.env:
        return []
    return [n for sub in ast.walk(node) if isinstance(sub, ast.Name) for n in state.env.get(sub.id, ())]


def _own_returns(func: ast.AST) -> list[ast.Return]:
    """The `return` statements of a function, not of the functions nested in it."""
    return [node for node in own_nodes(func) if isinstance(node, ast.Return)]


def _is_generator(node: ast.AST) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    return any(isinstance(sub, (ast.Yield, ast.YieldFrom)) for sub in ast.walk(node))
