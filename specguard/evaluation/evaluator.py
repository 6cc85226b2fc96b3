"""The static evaluator: runs functions of the analyzed source on abstract values, path by path.

It walks a function's statements (`ast`) with what its caller knows (concrete values, labelled unknowns, objects).
A test it can decide picks its branch. A test it cannot decide forks: both branches run and their states join
after it (see `Semantics.join`); when the test is about the question's subject (`Hooks.subjects`), or when the
client asks for every undecided test (`Semantics.name_every_doubt`, the config pre-flight), the test becomes a
named condition on the paths under it, so a verdict can say "not decided because of <this test>". Calls of the
source's functions are inlined up to `max_depth`; builtins and a few standard-library functions are evaluated;
anything else gives an unknown that keeps, as a `maybe`, what its arguments were derived from.

It never imports or runs the analyzed code. Two budgets bound every evaluation: the statements and expressions
it may evaluate and the elements its builtins, methods and operators walk or build (`budget`, then OutOfBudget;
a number of steps comes with `budget.RULES_WORK`, and `within`, the budget of the file judged, is charged too),
and the size of every value it builds (`MAX_ITEMS`, then unknown, sized before it is built).

Raises: by default a `raise`, or an `assert` whose test fails, ends its path (`Flow.raises`, and an outcome is
recorded), and a call whose every path raises ends its caller's path. With `Semantics.raise_ends_path=False` (the
config pre-flight) a raise is recorded and evaluation goes on past it as if it had not fired, so each validation
is judged on its own, an undecided `assert` is assumed to hold for the code after it, and `try` is judged against
the raises recorded in its body (`recorded`).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from specguard.evaluation import environment, exceptions
from specguard.evaluation.budget import MAX_ITEMS, RULES_WORK, Budget, OutOfBudget, result_size, too_large
from specguard.evaluation.builtins import MAX_ITERATIONS, Builtins
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.paths import Cond, Flow, Frame, Outcome, State, chain, join_values, merge, merge_agreed
from specguard.evaluation.recorded import RecordedRaises
from specguard.evaluation.semantics import RULES, Semantics
from specguard.evaluation.values import (
    NOT_HANDLED,
    STAR_KWARGS,
    UNKNOWN,
    Abstract,
    Bound,
    ClassRef,
    Deferred,
    EnumMember,
    Function,
    LiteralType,
    Many,
    Method,
    ModuleRef,
    Obj,
    OneOf,
    Opaque,
    Partial,
    PyMethod,
    Sym,
    Tagged,
    is_unknown,
    known,
    labels_of,
    maybe_of,
    plain,
    same_value,
    settled,
    traced,
    unknown_from,
    with_labels,
)
from specguard.program.ast_tools import absolute_module, cached_on
from specguard.program.tree import SourceTree, dotted, message_of

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
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}

_MAX_SHIFT = 4096
LOOP_ROUNDS = 3  # a loop over an unknown sequence runs its body until its locals settle, at most this often

_STAR_UNKNOWN: Any = object()
_RAISED: Any = object()  # an alternative that raises


class _PathEnds(Exception):
    """The statement being evaluated raises on every path (a call whose every path raised, an unpacking of the
    wrong length): its path ends there, as a raise an enclosing `try` may catch. `raised`: the names of what it
    raises and of its bases, where known."""

    def __init__(self, raised: set[str] | None = None) -> None:
        super().__init__()
        self.raised = raised


def too_costly(op: ast.operator, left: Any, right: Any) -> bool:
    """A result the evaluator does not build: larger than the budget's caps (see `budget.result_size`), or a shift
    that would be."""
    if isinstance(op, ast.LShift):
        return not isinstance(right, int) or right > _MAX_SHIFT
    return result_size(op, left, right) is None


class Evaluator(Builtins, RecordedRaises):
    """Evaluates functions of one program; outcomes of every run accumulate in `outcomes`."""

    def __init__(
        self,
        tree: SourceTree,
        *,
        hooks: Hooks | None = None,
        hook: Callable[..., Any] | None = None,
        watch_calls: Iterable[ast.AST] = (),
        watch_attrs: Iterable[str] = (),
        max_depth: int = 4,
        budget: int | Budget = 60_000,
        within: Budget | None = None,
        semantics: Semantics = RULES,
        inline_unused: bool = True,
        track_returns: bool = False,
    ) -> None:
        self.tree = tree
        self.semantics = semantics
        self.hooks = hooks or Hooks()
        self.hook = hook
        self.watch_calls = {id(n) for n in watch_calls}
        self.watch_attrs = set(watch_attrs)
        self.max_depth = max_depth
        # A Budget given (the config pre-flight's, shared with its run) also chooses the pre-flight's way with data:
        # a string or a dict's keys are walked whole (the budget bounds it) and each path of an undecided test holds
        # its own copies of the containers. Steps and work are counted either way: a number of steps (the rules')
        # gets the work of one evaluation with it, both charged to `within` too (the budget of the file judged).
        self.work = budget if isinstance(budget, Budget) else None
        self.meter = self.work or Budget(budget, RULES_WORK, parent=within)  # type: ignore[arg-type]
        self.step = self.meter.step  # type: ignore[method-assign]
        self.charge = self.meter.spend  # type: ignore[method-assign]
        self.raise_ends_path = semantics.raise_ends_path
        self.track_returns = track_returns  # record what the function `call_function` runs returns, path by path
        self._top_returns: set[int] = set()
        self._reraise: list[list[Outcome]] = []
        self.env = environment.current()
        self.quiet = 0  # > 0 while a module-level value is computed: its branches decide no verdict
        self._module_reads: dict[tuple[str, str], list[str]] = {}
        self.inline_unused = inline_unused  # also inline calls whose result is dropped and that get nothing labelled
        # A writer run's instance: a module-level call stored straight into one of its attributes is evaluated
        # when something reads the attribute (a Deferred), so the calls behind attributes no one reads cost nothing.
        self.lazy_owner: Obj | None = None
        self.outcomes: list[Outcome] = []
        self.calls: list[ast.AST] = []  # the call nodes being inlined, outermost first
        self._conds: dict[tuple[int, str], Cond] = {}
        self._module_values: dict[tuple[str, str], Any] = {}
        self._resolving: set[tuple[str, str]] = set()
        self._active: dict[int, int] = {}  # id(function node) -> how many of its calls are being inlined
        self._dropped: set[int] = set()  # call nodes whose result is not used (expression statements)
        self._trying = 0  # how many `try` bodies are being run: only a raise inside one needs its class's lineage
        # Inside a `try` body, the raising paths of a call that also returns: each (path, what it raises) becomes a
        # raise of the statement holding the call, which that statement's block adds to its flow.
        self._pending: list[tuple[frozenset, set[str] | None]] = []

    # ---- entry points ------------------------------------------------------------------------------------------

    def call_function(
        self,
        func: Function,
        args: list[Any],
        kwargs: dict[str, Any],
        path: frozenset = frozenset(),
        self_value: Any = None,
        depth: int = 0,
    ) -> tuple[Any, State]:
        """Run `func` with these arguments; returns its value (joined over its paths) and the end state."""
        state = State({}, {}, path)
        if self.track_returns:
            self._top_returns = {id(n) for n in own_nodes(func.node) if isinstance(n, ast.Return)}
        try:
            value = self._invoke(func, self_value, args, kwargs, state, depth, force=True)
        except _PathEnds:
            value = UNKNOWN
        return value, state

    def run(
        self, func: Function, bindings: dict[str, Any], path: frozenset = frozenset(), writes: dict | None = None
    ) -> Flow:
        """Run `func`'s body with its parameters bound as given (and objects' attributes as `writes` has them):
        every path's end (returns, raises)."""
        state = State(dict(bindings), dict(writes or {}), path)
        frame = Frame(func.module, func.owner, func.closure, 0)
        body = func.node.body if not isinstance(func.node, ast.Lambda) else []
        self._dropped |= _dropped_calls(func.node)
        flow = self.exec_block(body, frame, state)  # type: ignore[arg-type]
        if flow.normal is not None:
            flow.returns.append((flow.normal, None))
            flow.normal = None
        return flow

    def step(self) -> None:
        """One statement or expression evaluated (bound to the meter's `step` in `__init__`)."""

    # ---- statements ---------------------------------------------------------------------------------------------

    def exec_block(self, stmts: list[ast.stmt], frame: Frame, state: State) -> Flow:
        flow = Flow()
        current: State | None = state
        for stmt in stmts:
            if current is None:
                break
            self.step()
            before = current.copy() if self._trying else None
            mark = len(self._pending)
            try:
                res = self.exec_stmt(stmt, frame, current)
            except _PathEnds as ends:
                self._raise_pending(flow, before, mark)
                if self.raise_ends_path:
                    flow.raises.append(replace(current, raised=ends.raised))
                current = None
                break
            except RecursionError:  # nested too deep to evaluate: what it binds is unknown, the rest goes on
                if self.work is not None:  # a budget that counts work: the evaluation is too costly
                    raise OutOfBudget("the code is too deeply nested to evaluate") from None
                for name in assigned_names([stmt]):
                    current.locals[name] = UNKNOWN
                res = Flow(normal=current)
            flow.returns += res.returns
            flow.breaks += res.breaks
            flow.continues += res.continues
            flow.raises += res.raises
            self._raise_pending(flow, before, mark)
            current = res.normal
        flow.normal = current
        return flow

    def _raise_pending(self, flow: Flow, before: State | None, mark: int) -> None:
        """The raises of the calls the last statement made that raise on some of their paths only: each a path
        from the state before that statement, as the raise leaves it (the statement's own effects not done)."""
        pending, self._pending[mark:] = self._pending[mark:], []
        if before is not None:
            flow.raises += [replace(before.copy(), path=path, raised=raised) for path, raised in pending]

    def exec_stmt(self, stmt: ast.stmt, frame: Frame, state: State) -> Flow:
        method = _STATEMENTS.get(type(stmt))
        if method is not None:
            return method(self, stmt, frame, state)
        # class definitions and anything newer: what they bind is unknown
        for name in assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        return Flow(normal=state)

    def _s_expr(self, stmt: ast.Expr, frame: Frame, state: State) -> Flow:
        self.eval(stmt.value, frame, state)
        return Flow(normal=state)

    def _s_assign(self, stmt: ast.Assign, frame: Frame, state: State) -> Flow:
        mark = len(self.env.log)
        value = self._deferred(stmt.targets, stmt.value, frame, state) or self.eval(stmt.value, frame, state)
        for target in stmt.targets:
            self.assign(target, value, frame, state, stmt)
            self._carry_env(target, stmt.value, state, mark)
        return Flow(normal=state)

    def _s_annassign(self, stmt: ast.AnnAssign, frame: Frame, state: State) -> Flow:
        if stmt.value is not None:
            mark = len(self.env.log)
            value = self._deferred([stmt.target], stmt.value, frame, state) or self.eval(stmt.value, frame, state)
            self.assign(stmt.target, value, frame, state, stmt)
            self._carry_env(stmt.target, stmt.value, state, mark)
        return Flow(normal=state)

    def _deferred(self, targets: list[ast.expr], value: ast.expr, frame: Frame, state: State) -> Deferred | None:
        """In a writer run (see `lazy_owner`), an assignment to locals or to the instance's attributes whose value
        cannot write the instance: evaluated where it was written, on the state it had there, when first read."""
        if self.lazy_owner is None or not self._lazy_targets(targets, state) or not self._inert(value, frame, state):
            return None
        snapshot = state.copy()

        def evaluate() -> Any:
            try:
                return self.eval(value, frame, snapshot)
            except (OutOfBudget, RecursionError, _PathEnds):
                return UNKNOWN  # as the whole writer run would have been: nothing known of it

        return Deferred(evaluate)

    def _lazy_targets(self, targets: list[ast.expr], state: State) -> bool:
        """Locals, attributes of the instance, or tuples of those: what a deferred value may be stored into."""
        for target in targets:
            if isinstance(target, (ast.Tuple, ast.List)):
                if not self._lazy_targets(target.elts, state):
                    return False
            elif isinstance(target, ast.Attribute):
                if not (isinstance(target.value, ast.Name) and self._owner(target.value.id, state)):
                    return False
            elif not isinstance(target, ast.Name):
                return False
        return True

    def _owner(self, name: str, state: State) -> bool:
        return name in state.locals and plain(state.locals[name]) is self.lazy_owner

    def _inert(self, value: ast.expr, frame: Frame, state: State) -> bool:
        """An expression that cannot write the instance or bind a name: its calls are of module-level functions
        and classes not handed the instance itself (a method of an object may write anything)."""
        for node in ast.walk(value):
            if isinstance(node, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
                return False
            if isinstance(node, ast.Call):
                if not self._module_level(node.func, frame, state):
                    return False
                arguments = [*node.args, *(kw.value for kw in node.keywords)]
                if any(isinstance(a, ast.Name) and self._owner(a.id, state) for a in arguments):
                    return False
        return True

    def _s_augassign(self, stmt: ast.AugAssign, frame: Frame, state: State) -> Flow:
        mark = len(self.env.log)
        current = self.eval(stmt.target, frame, state)
        value = self.binop(stmt.op, current, self.eval(stmt.value, frame, state))
        self.assign(stmt.target, value, frame, state, stmt)
        self._carry_env(stmt.target, stmt, state, mark)
        return Flow(normal=state)

    def _carry_env(self, target: ast.expr, value: ast.AST, state: State, mark: int) -> None:
        """What a local assigned here was computed from (`Semantics.served_environment`): the environment's
        variables read meanwhile, and those the locals it reads were computed from."""
        if not self.semantics.served_environment:
            return
        names = frozenset([*self.env.log[mark:], *_env_of(value, state)])
        for name in _bound_names(target):
            if names:
                state.env[name] = names
            else:
                state.env.pop(name, None)

    def test(self, test: ast.expr, frame: Frame, state: State) -> tuple[Any, Any]:
        """A branch's test: its value and its truth. With `Semantics.served_environment`, one the serving
        environment decides is remembered there: the variables read while evaluating it, or that the locals it
        reads were computed from."""
        mark = len(self.env.log)
        value = self.eval(test, frame, state)
        truth = self.truth(value, frame, state)
        if self.semantics.served_environment and truth is not UNKNOWN and not self.quiet:
            self.env.decide([*self.env.log[mark:], *_env_of(test, state)])
        return value, truth

    def _parallel(self, first: Flow, second: Flow) -> Flow:
        """Two alternative flows (the branches of a test, a try body and one of its handlers, two match cases)."""
        normals = [f.normal for f in (first, second) if f.normal is not None]
        return Flow(
            normal=self.merge_states(normals),
            returns=first.returns + second.returns,
            breaks=first.breaks + second.breaks,
            continues=first.continues + second.continues,
            raises=first.raises + second.raises,
        )

    def fork(self, state: State, path: frozenset | None = None) -> State:
        """A state for one path of an undecided test; where work is counted, holding its own containers."""
        return state.copy(path, self.work)

    def merge_states(self, states: list[State]) -> State | None:
        """One state where paths meet again (see `Semantics.join`)."""
        if self.semantics.join == "unknown":
            return merge_agreed(states, self.work)
        return merge(states)

    def join(self, options: list[tuple[Any, frozenset]]) -> Any:
        """One value for what paths give differently (see `Semantics.join`)."""
        if self.semantics.join == "unknown":
            first = options[0][0]
            return first if all(same_value(first, value) for value, _ in options[1:]) else UNKNOWN
        return join_values(options)

    def _s_if(self, stmt: ast.If, frame: Frame, state: State) -> Flow:
        return self._branch(stmt.test, stmt.body, stmt.orelse, frame, state)

    def _s_return(self, stmt: ast.Return, frame: Frame, state: State) -> Flow:
        value = self.eval(stmt.value, frame, state) if stmt.value is not None else None
        if id(stmt) in self._top_returns:  # what the function `call_function` runs returns
            self.record("return", frame.module, stmt, "", state.path, value)
        return Flow(returns=[(state, value)])

    def _s_raise(self, stmt: ast.Raise, frame: Frame, state: State) -> Flow:
        if not self.raise_ends_path:
            return self._recorded_raise(stmt, frame, state)
        if stmt.exc is not None:
            self.eval(stmt.exc, frame, state)
        self.record("raise", frame.module, stmt, message_of(stmt.exc) if stmt.exc is not None else "", state.path)
        raised = exceptions.raised_by(stmt, frame.module.name, self.tree) if self._trying else None
        return Flow(raises=[replace(state, raised=raised)])

    def _s_assert(self, stmt: ast.Assert, frame: Frame, state: State) -> Flow:
        test, truth = self.test(stmt.test, frame, state)
        message = message_of(stmt.msg) if stmt.msg is not None else ""
        if truth is True:
            return Flow(normal=state)
        if truth is False:
            self.record("assert", frame.module, stmt, message, state.path)
            if not self.raise_ends_path:
                return Flow(normal=state)
            return Flow(raises=[replace(state, raised=exceptions.python_lineage("AssertionError"))])
        doubt = self.is_doubt(test)
        cond = self.cond(stmt.test, frame.module) if doubt else None
        failing = state.path | {(cond, False)} if cond is not None else state.path
        self.record("assert", frame.module, stmt, message, failing)
        if not self.raise_ends_path:
            return Flow(normal=state)
        passing = state.copy(state.path | {(cond, True)}) if cond is not None else state
        return Flow(
            normal=passing, raises=[replace(state.copy(failing), raised=exceptions.python_lineage("AssertionError"))]
        )

    def _s_loop_while(self, stmt: ast.While, frame: Frame, state: State) -> Flow:
        if self.semantics.loops == "once":
            return self._loop_once(stmt, stmt.test, stmt.body, frame, state)
        truth = self.truth(self.eval(stmt.test, frame, state), frame, state)
        if truth is False:
            return self.exec_block(stmt.orelse, frame, state)
        return self._loop_unknown(stmt, None, stmt.body, frame, state)

    def _s_for(self, stmt: ast.For | ast.AsyncFor, frame: Frame, state: State) -> Flow:
        iterable = self.eval(stmt.iter, frame, state)
        items = self.iterate(iterable)
        if items is None and self.semantics.loops == "once":
            return self._loop_once(stmt, stmt.iter, stmt.body, frame, state)
        if items is None:
            return self._loop_unknown(stmt, self.element_of(iterable), stmt.body, frame, state)
        flow = Flow()
        current: State | None = state
        broke: list[State] = []
        for item in items:
            if current is None:
                break
            if self.work is None:  # where work is counted, the body's statements count the rounds
                self.step()
            self.assign(stmt.target, item, frame, current, stmt)
            res = self.exec_block(stmt.body, frame, current)
            flow.returns += res.returns
            flow.raises += res.raises
            broke += res.breaks
            current = self.merge_states([s for s in [res.normal, *res.continues] if s is not None])
        if current is not None:
            res = self.exec_block(stmt.orelse, frame, current)
            flow.returns += res.returns
            flow.raises += res.raises
            current = res.normal
        flow.normal = self.merge_states([s for s in [current, *broke] if s is not None])
        return flow

    def _loop_once(self, stmt: ast.stmt, over: ast.expr, body: list[ast.stmt], frame: Frame, state: State) -> Flow:
        """A loop run once (`Semantics.loops == "once"`): what it assigns is unknown before and after, and its body
        runs under the named condition that it runs at all (named by what it iterates over or tests)."""
        for name in assigned_names(body) | assigned_names([stmt]):
            state.locals[name] = UNKNOWN
        cond = self.cond(over, frame.module)
        res = self.exec_block(body, frame, self.fork(state, state.path | {(cond, True)}))
        after = self.merge_states([s for s in [state, res.normal, *res.breaks, *res.continues] if s is not None])
        if after is not None:
            after.path = state.path
            for name in assigned_names(body):
                after.locals[name] = UNKNOWN
        return Flow(normal=after, returns=res.returns)

    def _loop_unknown(self, stmt: ast.stmt, element: Any, body: list[ast.stmt], frame: Frame, state: State) -> Flow:
        """A loop that runs an unknown number of times: its body runs from the state before it and from the state
        after each run until its locals settle (LOOP_ROUNDS at most), and every one of those states is a way out."""
        flow = Flow()
        target = getattr(stmt, "target", None)
        exits: list[State] = [state]
        current = state
        containers = _containers(state)
        for _ in range(LOOP_ROUNDS):
            entry = current.copy()
            if target is not None:
                self.assign(target, element, frame, entry, stmt)
            res = self.exec_block(body, frame, entry)
            flow.returns += res.returns
            flow.raises += res.raises
            exits += res.breaks
            again = merge([s for s in [current, res.normal, *res.continues] if s is not None])
            if again is None or _settled(current, again):
                break
            exits.append(again)
            current = again
        after = merge(exits)
        if after is not None:
            _loosen(after, containers)
            after.path = state.path
            orelse = getattr(stmt, "orelse", [])
            if orelse:
                res = self.exec_block(orelse, frame, after)
                flow.returns += res.returns
                flow.raises += res.raises
                after = merge([s for s in [res.normal, *[e for e in exits if e is not state]] if s is not None])
        flow.normal = after
        return flow

    def _s_try(self, stmt: ast.Try, frame: Frame, state: State) -> Flow:
        if not self.raise_ends_path:
            return self._recorded_try(stmt, frame, state)
        self._trying += bool(stmt.handlers)
        try:
            flow = self.exec_block(stmt.body, frame, state)
        finally:
            self._trying -= bool(stmt.handlers)
        raised: list[State] = []
        if stmt.handlers:
            raised, flow.raises = flow.raises, []
        if flow.normal is not None and stmt.orelse:  # only where the body raised nothing; its raises go on up
            flow = chain(flow, self.exec_block(stmt.orelse, frame, flow.normal))
        caught: list[list[State]] = [[] for _ in stmt.handlers]
        for path in raised:  # the first handler that surely catches what it raises; before it, those that may
            for handler, into in zip(stmt.handlers, caught, strict=True):
                catches = exceptions.catches(handler, path.raised)
                if catches is not False:
                    into.append(path)
                if catches is True:
                    break
            else:
                flow.raises.append(path)  # no handler surely catches it: it may go on up
        for handler, paths in zip(stmt.handlers, caught, strict=True):
            for entry in _entries(paths):
                if handler.name:
                    entry.locals[handler.name] = UNKNOWN
                flow = self._parallel(flow, self.exec_block(handler.body, frame, entry))
        if flow.normal is not None and stmt.finalbody:
            flow = chain(flow, self.exec_block(stmt.finalbody, frame, flow.normal))
        return flow

    def _s_with(self, stmt: ast.With | ast.AsyncWith, frame: Frame, state: State) -> Flow:
        for item in stmt.items:
            value = self.eval(item.context_expr, frame, state)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, value if isinstance(value, Obj) else UNKNOWN, frame, state, stmt)
        return self.exec_block(stmt.body, frame, state)

    def _s_match(self, stmt: ast.Match, frame: Frame, state: State) -> Flow:
        subject = self.eval(stmt.subject, frame, state)
        flows: list[Flow] = []
        current: State | None = state
        for case in stmt.cases:
            if current is None:
                break
            matched = self._pattern(case.pattern, subject, frame, current)
            if matched is not False and case.guard is not None:
                guard = self.truth(self.eval(case.guard, frame, current), frame, current)
                matched = False if guard is False else matched if guard is True else UNKNOWN
            if matched is True:
                flows.append(self.exec_block(case.body, frame, current))
                current = None
            elif matched is UNKNOWN:
                flows.append(self.exec_block(case.body, frame, current.copy()))
        out = Flow(normal=current)
        for res in flows:
            out = self._parallel(out, res)
        return out

    def _pattern(self, pattern: ast.pattern, subject: Any, frame: Frame, state: State) -> Any:
        if isinstance(pattern, ast.MatchAs):
            inner = pattern.pattern
            matched = self._pattern(inner, subject, frame, state) if inner is not None else True
            if pattern.name and matched is not False:
                state.locals[pattern.name] = subject
            return matched
        if isinstance(pattern, ast.MatchValue):
            return self.truth(self.compare(ast.Eq(), subject, self.eval(pattern.value, frame, state)), frame, state)
        if isinstance(pattern, ast.MatchSingleton):
            return self.truth(self.compare(ast.Is(), subject, pattern.value), frame, state)
        if isinstance(pattern, ast.MatchOr):
            results = [self._pattern(p, subject, frame, state) for p in pattern.patterns]
            return True if True in results else UNKNOWN if UNKNOWN in results else False
        for name in _pattern_names(pattern):
            state.locals[name] = UNKNOWN
        return UNKNOWN

    def _s_def(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame, state: State) -> Flow:
        state.locals[stmt.name] = Function(frame.module, stmt, None, state.locals)
        return Flow(normal=state)

    def _s_import(self, stmt: ast.Import | ast.ImportFrom, frame: Frame, state: State) -> Flow:
        self._local_import(stmt, frame, state)
        return Flow(normal=state)

    def _s_delete(self, stmt: ast.Delete, frame: Frame, state: State) -> Flow:
        for target in stmt.targets:
            self._delete(target, frame, state)
        return Flow(normal=state)

    def _s_break(self, stmt: ast.stmt, frame: Frame, state: State) -> Flow:
        return Flow(breaks=[state])

    def _s_continue(self, stmt: ast.stmt, frame: Frame, state: State) -> Flow:
        return Flow(continues=[state])

    def _s_pass(self, stmt: ast.stmt, frame: Frame, state: State) -> Flow:
        return Flow(normal=state)

    def _branch(self, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame, state: State) -> Flow:
        value, truth = self.test(test, frame, state)
        if truth is True:
            return self.exec_block(body, frame, state)
        if truth is False:
            return self.exec_block(orelse, frame, state)
        if not self.is_doubt(value):
            yes = self.exec_block(body, frame, self.fork(state))
            no = self.exec_block(orelse, frame, self.fork(state))
            return self._parallel(yes, no)
        cond = self.cond(test, frame.module)
        if (cond, True) in state.path:
            return self.exec_block(body, frame, state)
        if (cond, False) in state.path:
            return self.exec_block(orelse, frame, state)
        yes = self.exec_block(body, frame, self.fork(state, state.path | {(cond, True)}))
        no = self.exec_block(orelse, frame, self.fork(state, state.path | {(cond, False)}))
        return self._parallel(yes, no)

    def is_doubt(self, value: Any) -> bool:
        """An undecided test that verdicts must name: every one (`Semantics.name_every_doubt`), else one about a
        subject."""
        if self.semantics.name_every_doubt:
            return True
        if isinstance(value, OneOf):  # one of a few known values: each is a real possibility, forked freely
            return False
        subjects = self.hooks.subjects
        return bool(subjects) and any(x.kind in subjects for x in labels_of(value) | maybe_of(value))

    def assign(self, target: ast.expr, value: Any, frame: Frame, state: State, stmt: ast.AST) -> None:
        if isinstance(target, ast.Name):
            hop = f"`{target.id}` (line {getattr(stmt, 'lineno', 0)})"
            kinds = self.hooks.traced
            if isinstance(value, Deferred):
                state.locals[target.id] = Deferred(lambda: traced(value.value(), hop, kinds)) if kinds else value
            else:
                state.locals[target.id] = traced(value, hop, kinds)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, Deferred):
            items = Deferred(lambda: self._unpacked_or_unknown(target.elts, value.value()))
            for index, element in enumerate(target.elts):
                self.assign(element, Deferred(lambda i=index: items.value()[i]), frame, state, stmt)
        elif isinstance(target, (ast.Tuple, ast.List)):
            self._unpack(target.elts, value, frame, state, stmt)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value, frame, state)
            if target.attr in self.watch_attrs:
                self.record("assign", frame.module, stmt, target.attr, state.path, (base, value))
            self.store(base, target.attr, value, state, stmt)
        elif isinstance(target, ast.Subscript):
            base = plain(self.eval(target.value, frame, state))
            key = plain(self.eval(target.slice, frame, state))
            in_list = isinstance(base, list) and isinstance(key, int) and -len(base) <= key < len(base)
            if (isinstance(base, dict) and known(key)) or in_list:
                base[key] = value
        elif isinstance(target, ast.Starred):
            self.assign(target.value, UNKNOWN, frame, state, stmt)

    def store(self, base: Any, attr: str, value: Any, state: State, node: ast.AST | None = None) -> None:
        base = plain(base)
        if isinstance(base, Obj) and attr not in base.pinned:
            state.writes[(id(base), attr)] = value
            if node is not None:
                base.nodes[attr] = node
        elif isinstance(base, Sym):
            state.writes[(base.name, attr)] = value

    def _unpack(self, targets: list[ast.expr], value: Any, frame: Frame, state: State, stmt: ast.AST) -> None:
        for target, item in zip(targets, self._unpacked(targets, value), strict=True):
            if isinstance(target, ast.Starred):
                self.assign(target.value, item if isinstance(item, list) else Many(item), frame, state, stmt)
            else:
                self.assign(target, item, frame, state, stmt)

    def _unpacked_or_unknown(self, targets: list[ast.expr], value: Any) -> list[Any]:
        try:
            return self._unpacked(targets, value)
        except _PathEnds:  # a deferred unpacking that would raise: read later, it is no value
            return [UNKNOWN] * len(targets)

    def _unpacked(self, targets: list[ast.expr], value: Any) -> list[Any]:
        """What each target of `a, *b, c = value` gets (a starred one: a list, or the element of an unknown)."""
        inner = plain(value)
        star = next((i for i, t in enumerate(targets) if isinstance(t, ast.Starred)), None)
        values: list[Any] | None = None
        if isinstance(inner, (list, tuple)) and known(len(inner)):
            items = [with_labels(v, self.provenance(value)) for v in inner]
            if star is None and len(items) == len(targets):
                values = items
            elif star is not None and len(items) >= len(targets) - 1:
                after = len(targets) - star - 1
                values = [*items[:star], list(items[star : len(items) - after]), *items[len(items) - after :]]
        if values is None and isinstance(inner, (list, tuple)) and self.raise_ends_path:
            raise _PathEnds(exceptions.python_lineage("ValueError"))  # too many or not enough values to unpack
        if values is None and isinstance(inner, (set, frozenset)) and self.raise_ends_path and star is None:
            if len(inner) != len(targets):
                raise _PathEnds(exceptions.python_lineage("ValueError"))
            values = sorted(inner, key=repr)
        if values is None:
            element = self.element_of(value)
            values = [element] * len(targets)
        return values

    def _local_import(self, stmt: ast.Import | ast.ImportFrom, frame: Frame, state: State) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                bound = alias.name if alias.asname else alias.name.split(".")[0]
                known_module = bound.startswith(self.tree.package) and self.tree.module(bound) is not None
                state.locals[alias.asname or bound] = ModuleRef(bound) if known_module else Opaque(bound)
            return
        source = absolute_module(frame.module.name, frame.module.is_package, stmt.level, stmt.module)
        for alias in stmt.names:
            if alias.name != "*":
                state.locals[alias.asname or alias.name] = self._resolved(source, alias.name)

    # ---- expressions --------------------------------------------------------------------------------------------

    def eval(self, expr: ast.expr | None, frame: Frame, state: State) -> Any:
        if expr is None:
            return None
        self.step()
        method = _EXPRESSIONS.get(type(expr))
        if method is None:
            return UNKNOWN
        return method(self, expr, frame, state)

    def _e_constant(self, e: ast.Constant, frame: Frame, state: State) -> Any:
        if isinstance(e.value, (str, bytes)) and too_large(len(e.value)):
            return UNKNOWN  # larger than any value the evaluation builds: it would only cost what it touches
        return e.value

    def _e_name(self, e: ast.Name, frame: Frame, state: State) -> Any:
        if e.id in state.locals:
            return settled(state.locals[e.id])
        if frame.closure is not None and e.id in frame.closure:
            return settled(frame.closure[e.id])
        return self.module_value(frame.module, e.id)

    def _e_attribute(self, e: ast.Attribute, frame: Frame, state: State) -> Any:
        return self.getattr(self.eval(e.value, frame, state), e.attr, state, frame.depth, node=e)

    def _e_tuple(self, e: ast.Tuple, frame: Frame, state: State) -> Any:
        items = self._elements(e.elts, frame, state)
        return tuple(items) if isinstance(items, list) else items

    def _e_list(self, e: ast.List, frame: Frame, state: State) -> Any:
        return self._elements(e.elts, frame, state)

    def _e_set(self, e: ast.Set, frame: Frame, state: State) -> Any:
        values = self._elements(e.elts, frame, state)
        return self.make_set(values) if isinstance(values, list) else values

    def _elements(self, elts: list[ast.expr], frame: Frame, state: State) -> Any:
        if too_large(len(elts)):
            return UNKNOWN  # a literal over the largest value's size: unknown, never built
        out: list[Any] = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                value = self.eval(elt.value, frame, state)
                items = self.iterate(value)
                if items is None:  # a container with an unknown part: its length and order are unknown
                    rest = [self.eval(x.value if isinstance(x, ast.Starred) else x, frame, state) for x in elts]
                    return Many(
                        join_values(
                            [
                                (self.element_of(v) if isinstance(x, ast.Starred) else v, frozenset())
                                for x, v in zip(elts, rest, strict=True)
                            ]
                        )
                    )
                if too_large(len(out) + len(items)):
                    return UNKNOWN  # `[*L, *L]`: sized before it is built
                self.charge(len(items))
                out.extend(items)
            else:
                out.append(self.eval(elt, frame, state))
        if too_large(len(out)):
            return UNKNOWN
        self.charge(len(out) + 1)
        return out

    def _e_dict(self, e: ast.Dict, frame: Frame, state: State) -> Any:
        if too_large(len(e.keys)):
            return UNKNOWN  # a literal over the largest value's size: unknown, never built
        out: dict[Any, Any] = {}
        for key, value in zip(e.keys, e.values, strict=True):
            if key is None:
                merged = plain(self.eval(value, frame, state))
                if not isinstance(merged, dict):
                    return unknown_from(merged)
                if too_large(len(out) + len(merged)):
                    return UNKNOWN  # `{**D, **D}`: sized before it is built
                self.charge(len(merged))
                out.update(merged)
                continue
            k = plain(self.eval(key, frame, state))
            if not known(k):
                return unknown_from(self.eval(value, frame, state))
            try:
                out[k] = self.eval(value, frame, state)
            except TypeError:
                return UNKNOWN
        return out

    def _e_joinedstr(self, e: ast.JoinedStr, frame: Frame, state: State) -> Any:
        parts: list[str] = []
        for value in e.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            assert isinstance(value, ast.FormattedValue)
            inner = plain(self.eval(value.value, frame, state))
            if not known(inner) or not isinstance(inner, (str, int, float, bool)) or value.format_spec is not None:
                return UNKNOWN
            parts.append(repr(inner) if value.conversion == ord("r") else str(inner))
            chars = sum(map(len, parts))
            if chars > MAX_ITEMS:
                return UNKNOWN
            self.charge(chars)
        return "".join(parts)

    def _e_boolop(self, e: ast.BoolOp, frame: Frame, state: State) -> Any:
        stop = isinstance(e.op, ast.Or)  # `or` stops at the first truthy value, `and` at the first falsy one
        undecided: list[Any] = []
        value: Any = None
        for operand in e.values:
            value = self._branch_value(operand, frame, state) if undecided else self.eval(operand, frame, state)
            if value is _RAISED:  # reached only past an undecided operand: the result is one of those
                return self._either(undecided)
            truth = self.truth(value, frame, state)
            if truth is UNKNOWN:
                undecided.append(value)
            elif truth is stop:
                if not undecided:
                    return value
                if self.semantics.join == "unknown":  # the truth is decided, the exact value only if it is a bool
                    return stop if isinstance(plain(value), bool) else UNKNOWN
                # An undecided operand came first: the result is that operand or this one.
                return self._either([*undecided, value])
        return self._either([*undecided, value]) if undecided else value

    def _either(self, values: list[Any]) -> Any:
        if self.semantics.join == "unknown":
            return self.join([(v, frozenset()) for v in values])
        if all(isinstance(plain(v), bool) or is_unknown(plain(v)) for v in values) and not any(
            labels_of(v) or maybe_of(v) for v in values
        ):
            return UNKNOWN
        return join_values([(v, frozenset()) for v in values])

    def _e_unaryop(self, e: ast.UnaryOp, frame: Frame, state: State) -> Any:
        value = self.eval(e.operand, frame, state)
        labels = self.provenance(value)
        if isinstance(e.op, ast.Not):
            truth = self.truth(value, frame, state)
            if truth is UNKNOWN:
                return unknown_from(value, keep=frozenset(x.kind for x in labels))
            return with_labels(not truth, labels)
        inner = plain(value)
        if not known(inner) or not isinstance(inner, (int, float)):
            return unknown_from(value, keep=frozenset(x.kind for x in labels_of(value)))
        if isinstance(e.op, ast.USub):
            return with_labels(-inner, labels_of(value))
        if isinstance(e.op, ast.UAdd):
            return with_labels(+inner, labels_of(value))
        if isinstance(e.op, ast.Invert) and isinstance(inner, int):
            return with_labels(~inner, labels_of(value))
        return UNKNOWN

    def _e_binop(self, e: ast.BinOp, frame: Frame, state: State) -> Any:
        left = self.eval(e.left, frame, state)
        right = self.eval(e.right, frame, state)
        if isinstance(e.op, ast.BitOr) and (isinstance(left, LiteralType) or isinstance(right, LiteralType)):
            values = tuple(
                (left.values if isinstance(left, LiteralType) else ())
                + (right.values if isinstance(right, LiteralType) else ())
            )
            return LiteralType(values)
        return self.binop(e.op, left, right)

    def binop(self, op: ast.operator, left: Any, right: Any) -> Any:
        """Arithmetic: known operands give the result, which keeps every label of both; an unknown operand gives an
        unknown that keeps them too (a padded count plus one is still padded)."""
        for side in (left, right):
            if isinstance(side, OneOf):
                others = [right if side is left else left]
                results = [
                    self.binop(op, with_labels(x, side.labels), others[0])
                    if side is left
                    else self.binop(op, others[0], with_labels(x, side.labels))
                    for x in side.options
                ]
                return join_values([(r, frozenset()) for r in results])
        labels = labels_of(left) | labels_of(right) if _labelled(left, right) else frozenset()
        a, b = plain(left), plain(right)
        if isinstance(op, ast.Mult) and (isinstance(a, list) or isinstance(b, list)):
            seq, count = (a, b) if isinstance(a, list) else (b, a)
            if not known(count):
                element = join_values([(v, frozenset()) for v in seq]) if seq else UNKNOWN
                return Many(element, labels_of(count))
        fn = _BINOPS.get(type(op))
        if fn is None or not known(a) or not known(b):
            kinds = frozenset(x.kind for x in labels)
            return unknown_from(left, right, keep=kinds)
        if not all(isinstance(v, (int, float, str, tuple, list, set, frozenset)) for v in (a, b)):
            return UNKNOWN
        if too_costly(op, a, b):
            return UNKNOWN
        self.charge(result_size(op, a, b) or 0)
        try:
            result = fn(a, b)
        except (ZeroDivisionError, TypeError, ValueError, OverflowError) as exc:
            return self.fails(type(exc).__name__)  # what Python raises for these known operands
        return with_labels(result, labels)

    def _e_ifexp(self, e: ast.IfExp, frame: Frame, state: State) -> Any:
        test = self.eval(e.test, frame, state)
        truth = self.truth(test, frame, state)
        if truth is True:
            return self.eval(e.body, frame, state)
        if truth is False:
            return self.eval(e.orelse, frame, state)
        a, b = self._branch_value(e.body, frame, state), self._branch_value(e.orelse, frame, state)
        if a is _RAISED or b is _RAISED:  # one side raises: the value, where there is one, is the other's
            if a is b:
                raise _PathEnds
            return b if a is _RAISED else a
        if self.is_doubt(test):
            cond = self.cond(e.test, frame.module)
            return self.join([(a, frozenset({(cond, True)})), (b, frozenset({(cond, False)}))])
        return self.join([(a, frozenset()), (b, frozenset())])

    def _branch_value(self, e: ast.expr, frame: Frame, state: State) -> Any:
        try:
            return self.eval(e, frame, state)
        except _PathEnds:
            return _RAISED

    def _e_namedexpr(self, e: ast.NamedExpr, frame: Frame, state: State) -> Any:
        value = self.eval(e.value, frame, state)
        self.assign(e.target, value, frame, state, e)
        return value

    def _e_subscript(self, e: ast.Subscript, frame: Frame, state: State) -> Any:
        base = self.eval(e.value, frame, state)
        inner = plain(base)
        if isinstance(inner, Opaque) and inner.name.rpartition(".")[2] == "Literal":
            elts = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            values: list[Any] = []
            for elt in elts:
                v = self.eval(elt, frame, state)
                values.extend(v.values if isinstance(v, LiteralType) else [v])
            return LiteralType(tuple(values))
        if isinstance(inner, Opaque) and inner.name.rpartition(".")[2] in ("Annotated", "ClassVar", "Final"):
            first = e.slice.elts[0] if isinstance(e.slice, ast.Tuple) else e.slice
            return self.eval(first, frame, state)
        if isinstance(e.slice, ast.Slice):
            return self._slice(base, e.slice, frame, state)
        key = self.eval(e.slice, frame, state)
        return self.subscript(base, key, e, frame, state)

    def subscript(self, base: Any, key: Any, node: ast.AST | None, frame: Frame, state: State) -> Any:
        inner, k = plain(base), plain(key)
        if isinstance(inner, ClassRef) and self.tree.is_enum(inner.info):
            if not isinstance(k, str):
                return UNKNOWN
            if k in self.tree.enum_members(inner.info):
                return EnumMember(inner.info, k)
            self.record(
                "raise", frame.module, node, f"KeyError: {k!r} is not a member of {inner.info.name}", state.path
            )
            return UNKNOWN
        if isinstance(inner, Many):
            return with_labels(inner.element, inner.labels)
        if is_unknown(inner):  # an element of an unknown container: derived from it
            return unknown_from(base, key, keep=frozenset(x.kind for x in labels_of(base)))
        if not known(k):  # any of its elements: each one is walked
            if isinstance(inner, (list, tuple)) and inner:
                self.charge(len(inner))
                labels = labels_of(base)
                return join_values([(with_labels(v, labels), frozenset()) for v in inner])
            if isinstance(inner, dict) and inner:
                self.charge(len(inner))
                return join_values([(v, frozenset()) for v in inner.values()])
            return unknown_from(base, key)
        if isinstance(inner, dict):
            return inner[k] if k in inner else self.fails("KeyError")
        if isinstance(inner, (list, tuple, str)) and isinstance(k, int):
            if -len(inner) <= k < len(inner):
                return with_labels(inner[k], self.provenance(base))
            return self.fails("IndexError")
        return UNKNOWN

    def fails(self, error: str) -> Any:
        """A known operation that raises `error` in Python (a division by zero, a missing key): its path ends there
        as a raise, or, where raises do not end paths (the config pre-flight), its value is unknown."""
        if self.raise_ends_path:
            raise _PathEnds(exceptions.python_lineage(error))
        return UNKNOWN

    def _slice(self, base: Any, node: ast.Slice, frame: Frame, state: State) -> Any:
        lower = self.eval(node.lower, frame, state) if node.lower is not None else None
        upper = self.eval(node.upper, frame, state) if node.upper is not None else None
        step = self.eval(node.step, frame, state) if node.step is not None else None
        inner = plain(base)
        if isinstance(inner, (list, tuple, str)) and all(known(plain(x)) for x in (lower, upper, step)):
            try:
                return with_labels(inner[slice(plain(lower), plain(upper), plain(step))], labels_of(base))
            except (TypeError, ValueError):
                return UNKNOWN
        if isinstance(inner, Many):
            return inner
        # `buf[:n]` of a buffer: a view of length n (the evaluator keeps n, labels included, for `len` and `.shape`)
        length = upper if lower in (None, 0) and step in (None, 1) and upper is not None else None
        return Abstract(labels_of(base), maybe_of(base), (), length)

    def _e_compare(self, e: ast.Compare, frame: Frame, state: State) -> Any:
        left = self.eval(e.left, frame, state)
        result: Any = True
        for op, comparator in zip(e.ops, e.comparators, strict=True):
            right = self.eval(comparator, frame, state)
            outcome = self.compare(op, left, right)
            if plain(outcome) is False:
                return outcome
            result = (
                outcome
                if result is True
                else self._either([result, outcome])
                if not is_unknown(plain(result))
                else result
            )
            left = right
        return result

    def _e_lambda(self, e: ast.Lambda, frame: Frame, state: State) -> Any:
        return Function(frame.module, e, None, dict(state.locals))

    def _e_await(self, e: ast.Await, frame: Frame, state: State) -> Any:
        return self.eval(e.value, frame, state)

    def _e_starred(self, e: ast.Starred, frame: Frame, state: State) -> Any:
        return self.eval(e.value, frame, state)

    def _comprehension(
        self, e: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, frame: Frame, state: State
    ) -> Any:
        """The elements, when every generator runs over a known sequence; otherwise an unknown collection whose
        element is evaluated once, with the loop variables standing for any element."""
        inner = state.copy()
        results: list[Any] | None = []
        self._generate(e, list(e.generators), frame, inner, results, 1)
        if results is None or (results and results[-1] is _STAR_UNKNOWN):
            element = self._element_once(e, frame, state.copy())
            return Many(element)
        return results

    def _generate(
        self, e: Any, generators: list[ast.comprehension], frame: Frame, state: State, out: list[Any], rounds: int
    ) -> None:
        """The elements of the comprehension, into `out`; `rounds`: how often this generator runs (the sizes of the
        sources around it, multiplied). A source is sized before it is walked: when every round of it would walk
        more than the largest value holds, the comprehension is an unknown collection without walking it."""
        if out and out[-1] is _STAR_UNKNOWN:
            return
        if not generators:
            element = (
                (self.eval(e.key, frame, state), self.eval(e.value, frame, state))
                if isinstance(e, ast.DictComp)
                else self.eval(e.elt, frame, state)
            )
            out.append(element)
            self.charge(1)
            if len(out) > (MAX_ITERATIONS if self.work is None else MAX_ITEMS):  # where work is counted, it bounds
                out.append(_STAR_UNKNOWN)
            return
        gen, rest = generators[0], generators[1:]
        source = self.eval(gen.iter, frame, state)
        sized = plain(source)
        if isinstance(sized, (dict, list, tuple, set, frozenset, str)) and too_large(rounds * len(sized)):
            out.append(_STAR_UNKNOWN)
            return
        items = self.iterate(source)
        if items is None or gen.is_async:
            out.append(_STAR_UNKNOWN)
            return
        for item in items:
            self.step()
            self.assign(gen.target, item, frame, state, e)
            keep: Any = True
            for cond in gen.ifs:
                truth = self.truth(self.eval(cond, frame, state), frame, state)
                if truth is UNKNOWN:
                    keep = UNKNOWN
                elif truth is False:
                    keep = False
                    break
            if keep is False:
                continue
            if keep is UNKNOWN:
                out.append(_STAR_UNKNOWN)
                return
            self._generate(e, rest, frame, state, out, rounds * len(items))
            if out and out[-1] is _STAR_UNKNOWN:
                return

    def _element_once(self, e: Any, frame: Frame, state: State) -> Any:
        for gen in e.generators:
            iterable = self.eval(gen.iter, frame, state)
            self.assign(gen.target, self.element_of(iterable), frame, state, e)
            for cond in gen.ifs:
                self.eval(cond, frame, state)
        if isinstance(e, ast.DictComp):
            return (self.eval(e.key, frame, state), self.eval(e.value, frame, state))
        return self.eval(e.elt, frame, state)

    def _e_listcomp(self, e: ast.ListComp, frame: Frame, state: State) -> Any:
        return self._comprehension(e, frame, state)

    def _e_generatorexp(self, e: ast.GeneratorExp, frame: Frame, state: State) -> Any:
        return self._comprehension(e, frame, state)

    def _e_setcomp(self, e: ast.SetComp, frame: Frame, state: State) -> Any:
        values = self._comprehension(e, frame, state)
        return self.make_set(values) if isinstance(values, list) else values

    def _e_dictcomp(self, e: ast.DictComp, frame: Frame, state: State) -> Any:
        pairs = self._comprehension(e, frame, state)
        if not isinstance(pairs, list):
            return UNKNOWN
        out = {}
        for key, value in pairs:
            if not known(plain(key)):
                return UNKNOWN
            out[plain(key)] = value
        return out

    # ---- calls ----------------------------------------------------------------------------------------------

    def _e_call(self, e: ast.Call, frame: Frame, state: State) -> Any:
        if not self.inline_unused and id(e) in self._dropped and self._module_level(e.func, frame, state):
            values = [self.eval(a.value if isinstance(a, ast.Starred) else a, frame, state) for a in e.args]
            values += [self.eval(kw.value, frame, state) for kw in e.keywords]
            if not any(labels_of(v) or maybe_of(v) for v in values):
                return UNKNOWN  # a module function whose result is dropped and that gets nothing labelled
        if isinstance(e.func, ast.Attribute):
            receiver = self.eval(e.func.value, frame, state)
            func = self.getattr(receiver, e.func.attr, state, frame.depth, node=e.func)
            if is_unknown(plain(func)):  # a method of something the evaluator cannot see into
                func = Method(receiver, e.func.attr)
        else:
            func = self.eval(e.func, frame, state)
        args: list[Any] = []
        for arg in e.args:
            if isinstance(arg, ast.Starred):
                items = self.iterate(self.eval(arg.value, frame, state))
                if items is None:
                    args.append(_STAR_UNKNOWN)
                else:
                    args.extend(items)
            else:
                args.append(self.eval(arg, frame, state))
        kwargs: dict[str, Any] = {}
        reads = self.hooks.reads(self, func)
        for kw in e.keywords:
            if reads is not None and kw.arg is not None and kw.arg not in reads and _pure(kw.value):
                kwargs[kw.arg] = UNKNOWN  # the hooks answer this call without reading it
                continue
            value = self.eval(kw.value, frame, state)
            if kw.arg is None:
                inner = plain(value)
                if isinstance(inner, dict) and all(isinstance(k, str) for k in inner):
                    if isinstance(kw.value, ast.Name) and self.hooks.traced:
                        hop = f"`{kw.value.id}` (line {kw.value.lineno})"
                        inner = {k: traced(v, hop, self.hooks.traced) for k, v in inner.items()}
                    kwargs.update(inner)
                else:
                    kwargs[STAR_KWARGS] = value
            else:
                kwargs[kw.arg] = value
        answered = self.hooks.call(self, func, args, kwargs, e, frame, state)
        if answered is not NOT_HANDLED:
            return answered
        if self.hook is not None:
            handled = self.hook(self, func, args, kwargs, e, frame, state)
            if handled is not NOT_HANDLED:
                return handled
        if id(e) in self.watch_calls:  # before it could be taken for a logging call
            self.record("call", frame.module, e, "", state.path, (func, args, kwargs))
            return UNKNOWN  # the caller only wants to know the call happens, and with what
        if (
            isinstance(e.func, ast.Attribute)
            and e.func.attr.startswith("warn")
            and (self.semantics.warn_by_name or not isinstance(func, (Function, Bound)))
        ):
            # `logger.warning(...)`, `logger.warning_once(...)`, `warnings.warn(...)`: whatever the logger is.
            self.record("warning", frame.module, e, message_of(e), state.path)
            return None
        return self.call(func, args, kwargs, e, frame, state)

    def _module_level(self, func: ast.expr, frame: Frame, state: State) -> bool:
        """Whether a callee is named through a module's globals (not a local, not an attribute of an object)."""
        while isinstance(func, ast.Attribute):
            func = func.value
        if not isinstance(func, ast.Name) or func.id in state.locals:
            return False
        return frame.closure is None or func.id not in frame.closure

    def call(
        self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        func = plain(func)
        if isinstance(func, Partial):
            return self.call(func.func, [*func.args, *args], {**func.kwargs, **kwargs}, node, frame, state)
        if isinstance(func, Bound):
            return self._invoke(func.func, func.self_value, args, kwargs, state, frame.depth + 1, node)
        if isinstance(func, Function):
            return self._invoke(func, None, args, kwargs, state, frame.depth + 1, node)
        if isinstance(func, PyMethod):
            return self.py_method(func, args, kwargs)
        if isinstance(func, Opaque):
            result = self.builtin(func.name, args, kwargs, node, frame, state)
            if not self.evaluates(func.name):
                self.unresolved(node, frame, state, [*args, *kwargs.values()])
            return result
        if isinstance(func, ClassRef):
            return self.instantiate(func.info, args, kwargs, node, frame, state)
        if isinstance(func, Method):
            self.unresolved(node, frame, state, [func.receiver, *args, *kwargs.values()])
            return self.unknown_method(func, args, kwargs, node)
        self.unresolved(node, frame, state, [func, *args, *kwargs.values()])
        return unknown_from(func, *args, *kwargs.values(), why=f"cannot resolve the call `{_text(node)}`")

    def unresolved(self, node: ast.AST, frame: Frame, state: State, values: list[Any]) -> None:
        """A call the evaluator does not follow. Inside a `try`, it may raise what a handler catches: a path into
        the handlers, under the condition that it raised (so what a handler does is undecided, never silent).
        Where its arguments hold the question's subject (`Hooks.unresolved_may_raise`), also inside objects and
        containers (the specs whose fields are the flags), the path goes on under the condition that it returned."""
        if self._trying and self.raise_ends_path:
            self._pending.append((state.path | {(self.cond(node, frame.module, "call"), False)}, None))
        if self.hooks.unresolved_may_raise and any(self._holds_doubt(v, 0) for v in values):
            state.path = state.path | {(self.cond(node, frame.module, "call"), True)}

    def _holds_doubt(self, value: Any, depth: int) -> bool:
        if self.is_doubt(value):
            return True
        value = plain(value)
        if depth >= 2:
            return False
        if isinstance(value, Obj):
            items = list(value.fields.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            items = list(value)
        elif isinstance(value, dict):
            items = list(value.values())
        else:
            return False
        return any(self._holds_doubt(item, depth + 1) for item in items[:64])

    def _invoke(
        self,
        func: Function,
        self_value: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        state: State,
        depth: int,
        node: ast.AST | None = None,
        force: bool = False,
    ) -> Any:
        if not force:
            if _is_generator(func.node):
                return unknown_from(*args, *kwargs.values(), why=f"`{func.qualname}` is a generator")
            if depth > self.max_depth:
                return self.not_followed(func, args, kwargs, f"calls are followed {self.max_depth} deep")
            if self._active.get(id(func.node), 0) >= 2:
                return self.not_followed(func, args, kwargs, f"`{func.qualname}` calls itself")
            if (
                not self.inline_unused
                and node is not None
                and id(node) in self._dropped
                and not any(labels_of(v) or maybe_of(v) for v in [self_value, *args, *kwargs.values()])
            ):
                return UNKNOWN
        bindings = self.bind(func, self_value, args, kwargs, depth)
        inner = State(bindings, state.writes, state.path)
        frame = Frame(func.module, func.owner, func.closure, depth)
        if isinstance(func.node, ast.Lambda):
            return self.eval(func.node.body, frame, inner)
        self._active[id(func.node)] = self._active.get(id(func.node), 0) + 1
        if node is not None:
            self.calls.append(node)
        self._dropped |= _dropped_calls(func.node)
        try:
            flow = self.exec_block(func.node.body, frame, inner)
        except RecursionError:
            return unknown_from(*args, why=f"`{func.qualname}` nests too deep to follow")
        finally:
            self._active[id(func.node)] -= 1
            if node is not None:
                self.calls.pop()
        ends = list(flow.returns)
        if flow.normal is not None:
            ends.append((flow.normal, None))
        if not ends:
            if flow.raises and self.raise_ends_path:
                known_raises = [s.raised for s in flow.raises if s.raised is not None]
                raise _PathEnds(set().union(*known_raises) if len(known_raises) == len(flow.raises) else None)
            return unknown_from(*args, why=f"`{func.qualname}` never returns")
        if flow.raises and self.raise_ends_path and self._trying:
            self._pending += [(s.path, s.raised) for s in flow.raises]
        if force and self.track_returns and flow.normal is not None:  # the implicit `return None` at its end
            self.record("return", func.module, func.node, "", flow.normal.path, None)
        if self.semantics.join == "unknown":  # what its paths agree on; the caller's path is not narrowed
            end_writes = merge_agreed([State({}, s.writes, s.path) for s, _ in ends], self.work)
            if end_writes is not None and end_writes.writes is not state.writes:
                state.writes.clear()
                state.writes.update(end_writes.writes)
            return self.join([(value, frozenset()) for _, value in ends])
        end = merge([State({}, s.writes, s.path) for s, _ in ends])
        assert end is not None
        state.writes.clear()
        state.writes.update(end.writes)
        state.path = end.path
        hop = f"returned by `{func.qualname}`"
        if len(ends) == 1:
            return traced(ends[0][1], hop, self.hooks.traced)
        return traced(join_values([(value, s.path - end.path) for s, value in ends]), hop, self.hooks.traced)

    def not_followed(self, func: Function, args: list[Any], kwargs: dict[str, Any], why: str) -> Any:
        """A call the evaluator does not inline: what its annotation promises, else an unknown derived from its
        arguments."""
        returns = getattr(func.node, "returns", None)
        if returns is not None:
            answered = self.hooks.annotation(self, returns, Frame(func.module, func.owner, None, 0))
            if answered is not NOT_HANDLED:
                return answered
        return unknown_from(*args, *kwargs.values(), why=why)

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
        spread = kwargs.get(STAR_KWARGS, UNKNOWN)
        defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
        for i, param in enumerate(positional):
            if i < len(values):
                out[param.arg] = values[i]
            elif param.arg in kwargs:
                out[param.arg] = kwargs[param.arg]
            elif unknown_rest or STAR_KWARGS in kwargs:
                out[param.arg] = self.element_of(spread) if STAR_KWARGS in kwargs else UNKNOWN
            elif defaults[i] is not None:
                out[param.arg] = self._default(defaults[i], func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.vararg is not None:
            out[spec.vararg.arg] = Many(UNKNOWN) if unknown_rest else tuple(values[len(positional) :])
        for param, default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if param.arg in kwargs:
                out[param.arg] = kwargs[param.arg]
            elif STAR_KWARGS in kwargs:
                out[param.arg] = self.element_of(spread)
            elif default is not None:
                out[param.arg] = self._default(default, func, depth)
            else:
                out[param.arg] = UNKNOWN
        if spec.kwarg is not None:
            named = {p.arg for p in [*positional, *spec.kwonlyargs]}
            extra = {k: v for k, v in kwargs.items() if k not in named and k != STAR_KWARGS}
            out[spec.kwarg.arg] = unknown_from(spread) if STAR_KWARGS in kwargs else extra
        return out

    def instantiate(
        self, cls: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, frame: Frame, state: State
    ) -> Any:
        """`Cls(...)`: an enum member by value, a dataclass from its fields, or an object its `__init__` fills."""
        if self.tree.is_enum(cls):
            if len(args) == 1 and not kwargs:
                return with_labels(self.enum_by_value(cls, args[0]), labels_of(args[0]))
            return UNKNOWN
        if not self.semantics.construct_objects:
            return UNKNOWN
        obj = Obj(cls)
        fields = self.dataclass_fields(cls)
        init = self.tree.method(cls, "__init__")
        if fields is not None and (init is None or init[1] in [k for k, _ in fields]):
            values = [v for v in args if v is not _STAR_UNKNOWN]
            for index, (klass, name) in enumerate(fields):
                if index < len(values):
                    obj.fields[name] = values[index]
                elif name in kwargs:
                    obj.fields[name] = kwargs[name]
                elif STAR_KWARGS in kwargs:
                    obj.fields[name] = self.element_of(kwargs[STAR_KWARGS])
                else:
                    default = field_default_of(klass, name)
                    module = self.tree.module(klass.module)
                    obj.fields[name] = (
                        self.eval(default, Frame(module, klass, None, frame.depth), State({}, {}, frozenset()))
                        if default is not None and module is not None
                        else UNKNOWN
                    )
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg is not None:
                        obj.nodes[kw.arg] = kw
            post = self.tree.method(cls, "__post_init__")
            if post is not None:
                self._call_method(post, obj, [], {}, node, frame, state)
            return obj
        if init is None:  # no constructor we can read: what it is given is what it holds
            obj.fields.update({k: v for k, v in kwargs.items() if k != STAR_KWARGS})
            if isinstance(node, ast.Call):
                obj.nodes.update({kw.arg: kw for kw in node.keywords if kw.arg})
        if init is not None:
            self._call_method(init, obj, args, kwargs, node, frame, state)
            # what the constructor wrote is the new object's own: it stays with the object wherever it goes
            for key in [k for k in state.writes if k[0] == id(obj)]:
                obj.fields[key[1]] = state.writes.pop(key)
        return obj

    def _call_method(
        self,
        found: tuple[Any, Any],
        obj: Obj,
        args: list[Any],
        kwargs: dict[str, Any],
        node: ast.AST,
        frame: Frame,
        state: State,
    ) -> None:
        method, klass = found
        module = self.tree.module(klass.module)
        if module is not None:
            self._invoke(Function(module, method, klass), obj, args, kwargs, state, frame.depth + 1, node)


def field_default_of(cls: Any, name: str) -> ast.expr | None:
    from specguard.evaluation.objects import field_default

    value = cls.attributes.get(name)
    return field_default(value) if value is not None else None


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
    """The environment's variables the locals `node` reads were computed from."""
    if not state.env:
        return []
    return [n for sub in ast.walk(node) if isinstance(sub, ast.Name) for n in state.env.get(sub.id, ())]


# A handler runs once per distinct path that reaches it, up to this many (more: the rest once, under all their
# undecided tests together).
_HANDLER_PATHS = 4


def _entries(paths: list[State]) -> list[State]:
    """The states a handler runs from: one per path its raises came on. Joined into one state, raises that came
    under different undecided tests (this call raised, or that one) would leave a path under none of them, and the
    handler's values would be judged as if it always ran."""
    by_path: dict[frozenset, list[State]] = {}
    for state in paths:
        by_path.setdefault(state.path, []).append(state)
    groups = list(by_path.values())
    if len(groups) > _HANDLER_PATHS:
        rest = [s for group in groups[_HANDLER_PATHS - 1 :] for s in group]
        under_all = frozenset().union(*(s.path for s in rest))
        groups = [*groups[: _HANDLER_PATHS - 1], [replace(s, path=under_all) for s in rest]]
    return [entry for group in groups if (entry := merge([s.copy() for s in group])) is not None]


def _labelled(*values: Any) -> bool:
    return any(isinstance(v, (Tagged, Abstract, Sym, Many, Obj)) for v in values)


def _containers(state: State) -> dict[int, Any]:
    """The lists, dicts and sets a state's variables hold, each with a copy of what it holds now; a deferred value
    not evaluated yet, with None (if a loop evaluates it, it held its `initial` before the loop)."""
    found: dict[int, Any] = {}
    for value in [*state.locals.values(), *state.writes.values()]:
        if isinstance(value, Deferred) and not value.settled:
            found[id(value)] = None
        elif isinstance(inner := _held(value), (list, dict, set)):
            found[id(inner)] = type(inner)(inner)
    return found


def _held(value: Any) -> Any:
    if isinstance(value, Deferred):
        return plain(value.value()) if value.settled else None
    return plain(value)


def _loosen(state: State, before: dict[int, Any]) -> None:
    """After a loop that ran an unknown number of times, a container it changed (`append`, `d[k] = ...`) holds what
    it held before or after any of its rounds: a list that grew has an unknown length, the values are joined."""
    for table in (state.locals, state.writes):
        for key, value in table.items():
            inner = _held(value)
            if not isinstance(inner, (list, dict, set)):
                continue
            old = before.get(id(inner))
            if old is None and isinstance(value, Deferred) and id(value) in before:
                old = value.initial  # evaluated in the loop: it held that before
            if old is not None and not _same_items(old, inner):
                table[key] = with_labels(_joined(old, inner), labels_of(settled(value)))


def _same_items(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    if isinstance(a, set):
        return a == b
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _joined(old: Any, new: Any) -> Any:
    def join(*values: Any) -> Any:
        return join_values([(v, frozenset()) for v in values])

    if isinstance(new, dict):
        return {k: join(old[k], v) if k in old else v for k, v in new.items()} | {
            k: v for k, v in old.items() if k not in new
        }
    if isinstance(new, list) and len(old) == len(new):
        return [join(a, b) for a, b in zip(old, new, strict=True)]
    items = [*old, *new]
    return Many(join(*items) if items else UNKNOWN)


def _settled(before: State, after: State) -> bool:
    keys = set(before.locals) | set(after.locals)
    return (
        all(_same_shape(before.locals.get(k, UNKNOWN), after.locals.get(k, UNKNOWN)) for k in keys)
        and before.writes.keys() == after.writes.keys()
    )


def _same_shape(a: Any, b: Any) -> bool:
    if same_value(a, b):
        return True
    if is_unknown(a) and is_unknown(b):
        return labels_of(a) == labels_of(b) and maybe_of(a) == maybe_of(b)
    return False


def _text(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return dotted(target) or ast.unparse(target)[:60]  # type: ignore[arg-type]


def is_static(node: ast.AST) -> bool:
    return any((dotted(d) or "").endswith("staticmethod") for d in getattr(node, "decorator_list", []))


def _is_generator(node: ast.AST) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    return cached_on(
        node, "generator", lambda n: any(isinstance(sub, (ast.Yield, ast.YieldFrom)) for sub in own_nodes(n))
    )


def own_nodes(node: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a function body, not of the functions, classes and lambdas nested in it."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        yield sub
        if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(sub))


def _pure(expr: ast.expr) -> bool:
    """An expression whose evaluation changes nothing (no call, no binding): skipping it loses nothing else."""
    return not any(
        isinstance(node, (ast.Call, ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)) for node in ast.walk(expr)
    )


def _dropped_calls(node: ast.AST) -> set[int]:
    """The calls of a function whose result is dropped (expression statements)."""
    return cached_on(
        node,
        "dropped",
        lambda n: {
            id(sub.value) for sub in own_nodes(n) if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Call)
        },
    )


def _pattern_names(pattern: ast.pattern) -> set[str]:
    names = set()
    for sub in ast.walk(pattern):
        name = getattr(sub, "name", None) or getattr(sub, "rest", None)
        if isinstance(name, str):
            names.add(name)
    return names


def assigned_names(stmts: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names


_STATEMENTS: dict[type, Callable[..., Flow]] = {
    ast.Expr: Evaluator._s_expr,
    ast.Assign: Evaluator._s_assign,
    ast.AnnAssign: Evaluator._s_annassign,
    ast.AugAssign: Evaluator._s_augassign,
    ast.If: Evaluator._s_if,
    ast.Return: Evaluator._s_return,
    ast.Raise: Evaluator._s_raise,
    ast.Assert: Evaluator._s_assert,
    ast.For: Evaluator._s_for,
    ast.AsyncFor: Evaluator._s_for,
    ast.While: Evaluator._s_loop_while,
    ast.Try: Evaluator._s_try,
    ast.With: Evaluator._s_with,
    ast.AsyncWith: Evaluator._s_with,
    ast.Match: Evaluator._s_match,
    ast.FunctionDef: Evaluator._s_def,
    ast.AsyncFunctionDef: Evaluator._s_def,
    ast.Import: Evaluator._s_import,
    ast.ImportFrom: Evaluator._s_import,
    ast.Delete: Evaluator._s_delete,
    ast.Break: Evaluator._s_break,
    ast.Continue: Evaluator._s_continue,
    ast.Pass: Evaluator._s_pass,
    ast.Global: Evaluator._s_pass,
    ast.Nonlocal: Evaluator._s_pass,
}
if hasattr(ast, "TryStar"):  # Python 3.11+
    _STATEMENTS[ast.TryStar] = Evaluator._s_try

_EXPRESSIONS: dict[type, Callable[..., Any]] = {
    ast.Constant: Evaluator._e_constant,
    ast.Name: Evaluator._e_name,
    ast.Attribute: Evaluator._e_attribute,
    ast.Tuple: Evaluator._e_tuple,
    ast.List: Evaluator._e_list,
    ast.Set: Evaluator._e_set,
    ast.Dict: Evaluator._e_dict,
    ast.JoinedStr: Evaluator._e_joinedstr,
    ast.BoolOp: Evaluator._e_boolop,
    ast.UnaryOp: Evaluator._e_unaryop,
    ast.BinOp: Evaluator._e_binop,
    ast.IfExp: Evaluator._e_ifexp,
    ast.NamedExpr: Evaluator._e_namedexpr,
    ast.Subscript: Evaluator._e_subscript,
    ast.Compare: Evaluator._e_compare,
    ast.Lambda: Evaluator._e_lambda,
    ast.Await: Evaluator._e_await,
    ast.Starred: Evaluator._e_starred,
    ast.ListComp: Evaluator._e_listcomp,
    ast.GeneratorExp: Evaluator._e_generatorexp,
    ast.SetComp: Evaluator._e_setcomp,
    ast.DictComp: Evaluator._e_dictcomp,
    ast.Call: Evaluator._e_call,
}
