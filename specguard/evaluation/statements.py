"""Statements, evaluated path by path: assignments and stores, branches and joins, loops, `try`, `with`,
`match`, `return`, `raise` and `assert`. A mixin of `evaluator.Evaluator`, which dispatches to it."""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from specguard.evaluation import exceptions
from specguard.evaluation.answers import answer, one_of_them
from specguard.evaluation.budget import OutOfBudget
from specguard.evaluation.builtins import Builtins
from specguard.evaluation.choices import joined
from specguard.evaluation.definitions import defining_test, enclosing_function, functions_of
from specguard.evaluation.nodes import assigned_names
from specguard.evaluation.paths import (
    Flow,
    Frame,
    PathEnds,
    State,
    chain,
    enclosing,
    join_values,
    merge,
    merge_agreed,
)
from specguard.evaluation.values import (
    UNKNOWN,
    Abstract,
    Bound,
    ClassRef,
    Deferred,
    Function,
    Many,
    Mapping,
    ModuleRef,
    Obj,
    OneOf,
    Opaque,
    Sym,
    anonymous,
    answer_key,
    bounded,
    is_unknown,
    known,
    labels_of,
    maybe_of,
    not_none,
    one_of,
    plain,
    same_value,
    settled,
    traced,
    unknown_from,
    why_of,
    with_labels,
)
from specguard.program.ast_tools import absolute_module, cached_on, last_name, walked
from specguard.program.tree import message_of, starts_as_none


class Statements(Builtins):
    """How the evaluator runs each kind of statement."""

    # ---- statements ---------------------------------------------------------------------------------------------

    def exec_block(self, stmts: list[ast.stmt], frame: Frame, state: State) -> Flow:
        flow = Flow()
        current: State | None = state
        for stmt in stmts:
            if current is None:
                break
            self.step()
            before = current.copy() if self._trying else None
            mark, sides = len(self._pending), len(self.side_raises)
            try:
                res = self.exec_stmt(stmt, frame, current)
            except PathEnds as ends:
                self._raise_pending(flow, before, mark)
                flow.raises += self._side_raises_since(sides)
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
            flow.raises += res.raises + self._side_raises_since(sides)
            simple = isinstance(stmt, _SIMPLE)
            current = self._raise_pending(flow, before, mark, res.normal, frame if simple else None)
        flow.normal = current
        return flow

    def _side_raises_since(self, mark: int) -> list[State]:
        """The raises inside the expressions of the statement run since `side_raises` held `mark` of them."""
        taken, self.side_raises[mark:] = self.side_raises[mark:], []
        return taken

    def _raise_pending(
        self, flow: Flow, before: State | None, mark: int, after: State | None = None, frame: Frame | None = None
    ) -> State | None:
        """The raises of the calls the last statement made that raise on some of their paths only: each a path
        from the state before that statement, as the raise leaves it (the statement's own effects not done).
        Where paths are taken one by one (`choices`) and whether a lookup in it missed (or a call the client
        answered raised) matters (its `try` ends otherwise in the handler than after its body, in the kinds that
        matter: noted by `_s_try`), a simple statement's possible miss is taken one way: it returned (no raise), or
        it raised (no state goes on after it). Returns the state after the statement."""
        pending, self._pending[mark:] = self._pending[mark:], []
        if before is None:
            return after
        choosing = self.choosing(frame) if frame is not None else None
        for path, raised, node in pending:
            # a lookup's miss, which the `try` around it was written for, or a call the client answered; a call the
            # evaluation does not read may raise too, but whether it does is the callee's: that path stays joined,
            # and a verdict on it undecided
            point = node if choosing is not None else None
            returned = choosing.take_outcome(point) if point is not None else None  # type: ignore[union-attr]
            if returned is None:
                if point is not None:
                    self._raise_points.append(point)  # noted where its `try` ends otherwise in a handler
            elif returned:
                continue  # this run: it returned
            else:
                after = None  # this run: it raised here
            # a raise that may be taken apart: so may the call of this function be, in its caller
            flow.raises.append(replace(before.copy(), path=path, raised=raised, at_point=node is not None))
        return after

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
            declared = self._declared_contents(stmt, frame, state)
            value = (
                declared
                or self._deferred([stmt.target], stmt.value, frame, state)
                or self.eval(stmt.value, frame, state)
            )
            if is_unknown(plain(value)):  # unknown in value, of the kind its annotation says
                value = self.kind_from(value, self.reading(stmt.annotation, frame.module, frame.owner))
            self.assign(stmt.target, value, frame, state, stmt)
            self._carry_env(stmt.target, stmt.value, state, mark)
        return Flow(normal=state)

    def _declared_contents(self, stmt: ast.AnnAssign, frame: Frame, state: State) -> Mapping | Many | None:
        """`self.cache: dict[int, X] = {}`: an object's container that starts empty is filled by other methods,
        so it holds what its annotation says (a dict of unknown keys of X), not nothing."""
        value = stmt.value
        empty = (
            isinstance(value, ast.Dict) and not value.keys or isinstance(value, (ast.List, ast.Set)) and not value.elts
        )
        if not empty or not self._object_attribute(stmt.target, state):
            return None
        declared = self.reading(stmt.annotation, frame.module, frame.owner)
        return declared if isinstance(declared, (Mapping, Many)) else None

    def _object_attribute(self, target: ast.expr, state: State) -> bool:
        """`obj.<attr>` of an object the evaluation holds (the instance a method runs on)."""
        if not isinstance(target, ast.Attribute) or not isinstance(target.value, ast.Name):
            return False
        return isinstance(plain(state.locals.get(target.value.id)), Obj)

    def _deferred(self, targets: list[ast.expr], value: ast.expr, frame: Frame, state: State) -> Deferred | None:
        """In a writer run (see `lazy_owner`), an assignment to locals or to the instance's attributes whose value
        cannot write the instance: evaluated where it was written, on the state it had there, when first read."""
        if self.lazy_owner is None or not self._lazy_targets(targets, state) or not self._inert(value, frame, state):
            return None
        snapshot = state.copy()

        def evaluate() -> Any:
            try:
                return self.eval(value, frame, snapshot)
            except (OutOfBudget, RecursionError, PathEnds):
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
        for node in walked(value):
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
        value = self.binop_at(stmt.op, current, self.eval(stmt.value, frame, state), state)
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
        """A state for one path of an undecided test, holding its own containers (what one path writes into a
        dict the other does not see), their copies charged to the meter."""
        return state.copy(path, self.meter)

    def merge_states(self, states: list[State]) -> State | None:
        """One state where paths meet again (see `Semantics.join`)."""
        if self.semantics.join == "unknown":
            return merge_agreed(states, self.work)
        return merge(states, self.kept)

    @property
    def kept(self) -> int | None:
        """In a writer run, the instance whose attributes keep what some paths write (see `merge`)."""
        return id(self.lazy_owner) if self.lazy_owner is not None else None

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
        # no test on the way on: every run that gets past the assertion has it hold, so what follows does not
        # depend on it (its failing side is the raise recorded above)
        failed = replace(state.copy(failing), raised=exceptions.python_lineage("AssertionError"))
        return Flow(normal=self.narrow(stmt.test, True, frame, state), raises=[failed])

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
            inner = plain(iterable)
            first = inner.first if isinstance(inner, Many) else None
            return self._loop_unknown(stmt, self.element_of(iterable), stmt.body, frame, state, first)
        flow = Flow()
        current: State | None = state
        broke: list[State] = []
        for item in items:
            if current is None:
                break
            if self.work is None:  # where work is counted, the body's statements count the rounds
                self.step()
            self.assign(stmt.target, item, frame, current, stmt)
            res = self._round(stmt, frame, current)
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

    def _round(self, stmt: ast.stmt, frame: Frame, entry: State, body: list[ast.stmt] | None = None) -> Flow:
        """One run of a loop's body; the states that go round again are the client's to relabel."""
        res = self.exec_block(stmt.body if body is None else body, frame, entry)  # type: ignore[attr-defined]
        for again in [res.normal, *res.continues]:
            if again is not None:
                self.hooks.round_ends(self, stmt, frame, again)  # type: ignore[arg-type]
        return res

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

    def _loop_unknown(
        self, stmt: ast.stmt, element: Any, body: list[ast.stmt], frame: Frame, state: State, first: Any = None
    ) -> Flow:
        """A loop that runs an unknown number of times: its body runs from the state before it and from the state
        after each run until its locals settle (LOOP_ROUNDS at most), and every one of those states is a way out.
        `first`, where known, is the target's value on the first run (`for i in range(n)`: 0)."""
        flow = Flow()
        target = getattr(stmt, "target", None)
        exits: list[State] = [state]
        current = state
        containers = _containers(state)
        unsettled: set[str] = set()
        for round_ in range(LOOP_ROUNDS):
            entry = current.copy()
            if target is not None:
                self.assign(target, first if round_ == 0 and first is not None else element, frame, entry, stmt)
            res = self._round(stmt, frame, entry, body)
            flow.returns += res.returns
            flow.raises += res.raises
            exits += res.breaks
            again = merge([s for s in [current, res.normal, *res.continues] if s is not None], self.kept)
            unsettled = _changed(current, again) if again is not None else set()
            if again is None or (not unsettled and current.writes.keys() == again.writes.keys()):
                break  # its locals (and the objects' attributes it writes) settled
            exits.append(again)
            current = again
        after = merge(exits, self.kept)
        if after is not None:
            _loosen(after, containers)
            for name in unsettled & after.locals.keys():  # still growing after the last round: any value
                value = settled(after.locals[name])
                after.locals[name] = unknown_from(value, keep=frozenset(x.kind for x in labels_of(value)))
            after.path = state.path
            orelse = getattr(stmt, "orelse", [])
            if orelse:
                res = self.exec_block(orelse, frame, after)
                flow.returns += res.returns
                flow.raises += res.raises
                after = merge(
                    [s for s in [res.normal, *[e for e in exits if e is not state]] if s is not None], self.kept
                )
        flow.normal = after
        return flow

    def _s_try(self, stmt: ast.Try, frame: Frame, state: State) -> Flow:
        if not self.raise_ends_path:
            return self._recorded_try(stmt, frame, state)
        self._trying += bool(stmt.handlers)
        points = len(self._raise_points)
        try:
            flow = self.exec_block(stmt.body, frame, state)
        finally:
            self._trying -= bool(stmt.handlers)
        raise_points, self._raise_points[points:] = self._raise_points[points:], []
        finished = flow.normal
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
        choosing = self.choosing(frame) if raise_points else None
        for handler, paths in zip(stmt.handlers, caught, strict=True):
            for entry in _entries(paths):
                if handler.name:
                    entry.locals[handler.name] = UNKNOWN
                handled = self.exec_block(handler.body, frame, entry)
                if choosing is not None:  # a raise that ends elsewhere than the body does matters path by path
                    for node in raise_points:
                        choosing.note_states(node, finished, handled.normal)  # type: ignore[arg-type]
                flow = self._parallel(flow, handled)
        if flow.normal is not None and stmt.finalbody:
            flow = chain(flow, self.exec_block(stmt.finalbody, frame, flow.normal))
        return flow

    def _s_with(self, stmt: ast.With | ast.AsyncWith, frame: Frame, state: State) -> Flow:
        exits: list[dict[tuple[Any, str], Any]] = []
        leaves: list[tuple[Any, ast.expr]] = []  # the `__exit__` of each object of the tree's classes entered
        for item in stmt.items:
            value = self.eval(item.context_expr, frame, state)
            enter, leave = self._manager_methods(value, frame, state)
            if enter is not None:  # an object of a class of the tree: its `__enter__` runs, and gives the target
                entered = self.call(enter, [], {}, item.context_expr, frame, state)
            else:  # a generator is entered only through `@contextmanager`: the target is what it yields
                entered = value.element if isinstance(value, Many) else value if isinstance(value, Obj) else UNKNOWN
            if leave is not None:
                leaves.append((leave, item.context_expr))
            if item.optional_vars is not None:
                self.assign(item.optional_vars, entered, frame, state, stmt)
            made = self.on_exit.get(id(value))
            if made is not None and made[0] is value:
                exits.append(made[1])
        flow = self.exec_block(stmt.body, frame, state)
        for after in reversed(exits):  # left innermost first: what each generator writes past its yield
            for left in [flow.normal, *(s for s, _ in flow.returns)]:
                if left is not None:
                    left.writes.update(after)
        for leave, node in reversed(leaves):  # the block left normally or by a return: `__exit__(None, None, None)`
            for left in [flow.normal, *(s for s, _ in flow.returns)]:
                if left is not None:
                    self.call(leave, [None, None, None], {}, node, frame, left)
        return flow

    def _manager_methods(self, value: Any, frame: Frame, state: State) -> tuple[Any, Any]:
        """The bound `__enter__` and `__exit__` of an object whose class, in the tree, defines them (None each
        where it does not)."""
        value = plain(value)
        if not isinstance(value, Obj) or value.cls is None:
            return None, None
        methods = []
        for name in ("__enter__", "__exit__"):
            method = self.getattr(value, name, state, frame.depth) if self.tree.method(value.cls, name) else None
            methods.append(method if isinstance(plain(method), Bound) else None)
        return methods[0], methods[1]

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
        state.locals[stmt.name] = Function(frame.module, stmt, None, enclosing(frame, state.locals))
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

    def _s_global(self, stmt: ast.Global, frame: Frame, state: State) -> Flow:
        """`global X` where the module starts X as None: this function reads the None it starts as, as on its first
        call (`if _DEPS is None: _DEPS = (...)`, a memo it fills); other functions read X as unknown (what its
        setter left, see `module_value`). Its writes stay with this run, as a local's."""
        for name in stmt.names:
            if name not in state.locals and starts_as_none(frame.module, name):
                state.locals[name] = None
        return Flow(normal=state)

    def _branch(self, test: ast.expr, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame, state: State) -> Flow:
        value, truth = self.test(test, frame, state)
        if truth is True:
            return self.exec_block(body, frame, state)
        if truth is False:
            return self.exec_block(orelse, frame, state)
        choosing = self.choosing(frame)
        sides = None
        doubt = self.is_doubt(value)
        if isinstance(test, ast.BoolOp) and not self.semantics.name_every_doubt and (doubt or choosing is not None):
            # operand by operand, as Python runs it: an operand forked freely (one of a few values, a setting) is
            # not made a doubt by another one beside it; each side's states joined, each block run once. Where an
            # operand decides it whatever the undecided ones are (`unknown or True`), one side has no state, and a
            # run taking tests one way (path by path) must not take the side no state reaches.
            sides = self._sides(test, frame, state)
            if not sides[0] or not sides[1]:
                decided = self.merge_states(sides[0] or sides[1])
                return self.exec_block(body if sides[0] else orelse, frame, decided)  # type: ignore[arg-type]
        side = choosing.take(test, frame, state, self._reread(frame, state)) if choosing is not None else None
        if side is not None:  # path by path (see `choices`): this run takes one side
            self.narrow(test, side, frame, state)
            return self.exec_block(body if side else orelse, frame, state)
        if sides is not None and doubt:
            trues, falses = sides
        else:
            trues, falses = self._forked(test, value, frame, state)
        if not trues or not falses:  # the path decides it (a doubt it passed already)
            decided = self.merge_states(trues or falses)
            return self.exec_block(body if trues else orelse, frame, decided)  # type: ignore[arg-type]
        with joined(choosing):
            yes = self.exec_block(body, frame, self.merge_states(trues))  # type: ignore[arg-type]
            no = self.exec_block(orelse, frame, self.merge_states(falses))  # type: ignore[arg-type]
        if choosing is not None:  # where it matters path by path
            choosing.note_states(test, yes.normal, no.normal)
        return self._parallel(yes, no)

    def _sides(self, test: ast.expr, frame: Frame, state: State) -> tuple[list[State], list[State]]:
        """The states where `test` holds and those where it does not, an `and`/`or` operand by operand: each
        undecided operand forks (a doubt under its condition), each decided one goes its way."""
        if isinstance(test, ast.BoolOp):
            stop = isinstance(test.op, ast.Or)  # the truth of an operand that decides the whole
            decided: list[State] = []
            going = [state]
            for part in test.values:
                onward: list[State] = []
                for current in going:
                    holds, fails = self._sides(part, frame, current)
                    decided += holds if stop else fails
                    onward += fails if stop else holds
                going = onward
            return (decided, going) if stop else (going, decided)
        value, truth = self.test(test, frame, state)
        if truth is True or truth is False:
            return ([state], []) if truth else ([], [state])
        return self._forked(test, value, frame, state)

    def _forked(self, test: ast.expr, value: Any, frame: Frame, state: State) -> tuple[list[State], list[State]]:
        """An undecided test's two sides, each a fork of `state` narrowed by it; a doubt's under its condition, or
        only the side its path passed already."""
        paths = state.path, state.path
        if self.is_doubt(value):
            cond = self.cond(test, frame.module)
            if (cond, True) in state.path or (cond, False) in state.path:
                return ([state], []) if (cond, True) in state.path else ([], [state])
            paths = state.path | {(cond, True)}, state.path | {(cond, False)}
        yes = self.narrow(test, True, frame, self.fork(state, paths[0]))
        return [yes], [self.narrow(test, False, frame, self.fork(state, paths[1]))]

    def choosing(self, frame: Frame) -> Any:
        """The path-by-path choices (see `choices`) where this frame's tests are taken one way, else None."""
        choices = self.choices
        if choices is None or frame.depth > choices.depth:
            return None
        if frame.depth > 1 and choices.within is not None and frame.module.name.partition(".")[0] != choices.within:
            return None
        return choices

    def is_doubt(self, value: Any) -> bool:
        """An undecided test that verdicts must name: every one (`Semantics.name_every_doubt`), else one about a
        subject."""
        if self.semantics.name_every_doubt:
            return True
        if isinstance(value, OneOf):  # one of a few known values: each is a real possibility, forked freely
            return False
        subjects = self.hooks.subjects
        return bool(subjects) and any(x.kind in subjects for x in labels_of(value) | maybe_of(value))

    def narrow(self, test: ast.expr, truth: bool, frame: Frame, state: State) -> State:
        """`state` on a path where `test` is `truth`: a name or attribute tested `is None` there is None, one
        tested `is not None` is not (an unknown object stays one, now known to exist); through `not`, and the
        parts of an `and` that holds or an `or` that does not."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.narrow(test.operand, not truth, frame, state)
        if isinstance(test, ast.Call) and truth and self._narrow_instance(test, frame, state):
            return state
        asked = self._question(test, frame, state)
        if asked is not None:  # `batch.forward_mode.is_idle()`: asked again on this path, it answers the same
            answer(state, asked, truth)
        if isinstance(test, ast.Call) and not test.args and not test.keywords and isinstance(test.func, ast.Attribute):
            self._narrow_options(test, truth, frame, state)
        if isinstance(test, ast.Call):  # a predicate helper: narrowed by the test it returns, on the caller's names
            inlined = self._predicate_test(test, frame, state)
            return state if inlined is None else self.narrow(inlined, truth, frame, state)
        if isinstance(test, ast.BoolOp) and truth == isinstance(test.op, ast.And):
            for part in test.values:
                self.narrow(part, truth, frame, state)
            return state
        if isinstance(test, ast.BoolOp):
            # an `and` that fails (an `or` that holds) where every operand but one is known to hold (to fail): that
            # one decided it (`if dcp and q_len > 1 and bound is None: raise`, passed: the bound is set)
            return self._narrow_by_the_other_operands(test, truth, frame, state)
        if isinstance(test, ast.Name) and test.id in state.locals:
            return self._narrow_local(test, truth, frame, state)
        if self._narrow_equal(test, truth, frame, state):
            return state
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
            and isinstance(test.left, (ast.Name, ast.Attribute))
        ):
            return state
        target = test.left
        if isinstance(target, ast.Name) and target.id not in state.locals:
            return state
        current = self.eval(target, frame, state)
        value = None if isinstance(test.ops[0], ast.Is) == truth else not_none(current)
        if value is current:
            return state
        self._bind_tested(target, value, frame, state)
        return state

    def _narrow_equal(self, test: ast.expr, truth: bool, frame: Frame, state: State) -> bool:
        """`x == 1` found true (`x != 1` false), `x` a name or attribute the path knows only by its name: it is 1
        there (`assert self.num_steps == 1`, then `range(self.num_steps)` runs once). Not a value the evaluation
        knows anything of (a tensor compares element-wise)."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
            return False
        if isinstance(test.ops[0], ast.Eq) != truth:
            return False
        target, constant = test.left, test.comparators[0]
        if isinstance(target, ast.Constant):
            target, constant = constant, target
        if not (
            isinstance(constant, ast.Constant)
            and type(constant.value) in (int, str, bool)
            and isinstance(target, (ast.Name, ast.Attribute))
        ):
            return False
        if isinstance(target, ast.Name) and target.id not in state.locals:
            return False
        current = plain(self.eval(target, frame, state))
        if not (isinstance(current, Sym) or current is UNKNOWN):
            return False
        self._bind_tested(target, constant.value, frame, state)
        return True

    def _bind_tested(self, target: ast.Name | ast.Attribute, value: Any, frame: Frame, state: State) -> None:
        """What a test found `target` to be, on its path: a local, or an attribute of the object it is read from."""
        if isinstance(target, ast.Name):
            state.locals[target.id] = value
        else:
            self.store(self.eval(target.value, frame, state), target.attr, value, state)

    def _narrow_options(self, test: ast.Call, truth: bool, frame: Frame, state: State) -> None:
        """`mode.is_idle()` found `truth` where `mode` is one of a few known values (a mode set under a test the
        path did not decide): `mode` is one of those that answer `truth`. It is one value computed once, so every
        place on the path holding it (a batch built from another copies its mode) holds the narrower one."""
        func = test.func
        assert isinstance(func, ast.Attribute)
        if any(isinstance(node, (ast.Call, ast.NamedExpr, ast.Await)) for node in walked(func.value)):
            return  # read again, it would run its calls a second time
        options = plain(self.eval(func.value, frame, state))
        if not isinstance(options, OneOf):
            return
        kept = []
        for option in options.options:
            method = self.getattr(option, func.attr, state, frame.depth)
            said = plain(self.call(method, [], {}, test, frame, state.copy())) if isinstance(method, Bound) else None
            if said is not (not truth):
                kept.append(option)
        if not kept or len(kept) == len(options.options):
            return
        narrower = one_of(kept, options.labels)
        for table in (state.locals, state.writes):
            for key, value in list(table.items()):
                if plain(value) is options:
                    table[key] = narrower
        for value in list(state.locals.values()):  # objects the path holds, built holding it
            value = plain(value)
            if isinstance(value, Obj):
                for attr, held in value.fields.items():
                    if plain(held) is options and (id(value), attr) not in state.writes:
                        state.writes[(id(value), attr)] = narrower

    def _narrow_local(self, test: ast.Name, truth: bool, frame: Frame, state: State) -> State:
        """A local the path found true or false: the test it was bound to is so too (see definitions.py); one found
        false that held an unknown holds a false value now (`if multi_step and synced: raise`, passed with `synced`
        true: a later `if multi_step:` is false, whichever false value it is)."""
        if not truth and anonymous(state.locals[test.id]):
            state.locals[test.id] = OneOf(_FALSE_VALUES, labels_of(state.locals[test.id]))
        (defined,) = cached_on(test, "defining_test", lambda _: (self._defining_test(test, frame),))
        return state if defined is None else self.narrow(defined, truth, frame, state)

    def _defining_test(self, test: ast.Name, frame: Frame) -> ast.expr | None:
        functions = cached_on(frame.module.tree, "functions", functions_of)
        function = enclosing_function(functions, test)
        return defining_test(function, test.id, test) if function is not None else None

    def _narrow_instance(self, test: ast.Call, frame: Frame, state: State) -> bool:
        """`isinstance(x, C)` held, `C` a class of the tree and `x` a name or attribute the evaluation does not know
        as an object: `x` is an instance of `C` on this path (`backend = self.decode_backend`, then `if not
        isinstance(backend, ForkBackend): return ...`: its methods are `C`'s). Whether it narrowed."""
        # read by its spelling first: every call tested on its true side comes here, and its callee was evaluated
        # by the test already (evaluating it again would ask the client's hooks again)
        if last_name(test.func) != "isinstance" or len(test.args) != 2:
            return False
        if test.keywords or not isinstance(test.args[0], (ast.Name, ast.Attribute)):
            return False
        func = plain(self.eval(test.func, frame, state))
        if not (isinstance(func, Opaque) and func.name == "builtins.isinstance"):
            return False
        kind = plain(self.eval(test.args[1], frame, state))
        target = test.args[0]
        if not isinstance(kind, ClassRef) or isinstance(target, ast.Name) and target.id not in state.locals:
            return False
        current = self.eval(target, frame, state)
        inner = plain(current)
        if not (is_unknown(inner) or isinstance(inner, Sym)) or isinstance(inner, Abstract) and inner.exists:
            return False
        value = Obj(kind.info, label=ast.unparse(target))
        if isinstance(target, ast.Name):
            state.locals[target.id] = value
        else:
            self.store(self.eval(target.value, frame, state), target.attr, value, state)
        return True

    def _reread(self, frame: Frame, state: State) -> Callable[[ast.expr], bool | None]:
        """The truth of an operand of a test: as this path took it, path by path, else read again where reading
        runs nothing (no call); None where it is not known."""
        choosing = self.choosing(frame)

        def read(part: ast.expr) -> bool | None:
            known = choosing.known(part, frame, state) if choosing is not None else None
            if known is not None:  # what this path took it to be (a test it took already, path by path)
                return known
            asked = self._question(part, frame, state)  # a question this path answered
            if asked is not None and isinstance(state.writes.get(asked), bool):
                return state.writes[asked]  # type: ignore[no-any-return]
            if any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Await, ast.Lambda)) for n in walked(part)):
                return None
            truth = self.truth(self.eval(part, frame, state), frame, state)
            return truth if isinstance(truth, bool) else None

        return read

    def _narrow_by_the_other_operands(self, test: ast.BoolOp, truth: bool, frame: Frame, state: State) -> State:
        """`state` where `test` (an `and` failing, an `or` holding) is `truth`, narrowed by its one operand that can
        be: every other one, read again without running anything, goes the way that leaves the whole to it."""
        read = self._reread(frame, state)
        open_parts = [part for part in test.values if read(part) is not (not truth)]
        if len(open_parts) == 1:
            return self.narrow(open_parts[0], truth, frame, state)
        # several questions open: one of them answers `truth`, which a later answer to the others may settle
        asked = [self._question(part, frame, state) for part in open_parts]
        if all(key is not None and state.writes.get(key) is None for key in asked):
            one_of_them(state, asked, truth)
        return state

    def _question(self, part: ast.expr, frame: Frame, state: State) -> Any:
        """The key a path keeps the answer to `part` under, where it is a question asked with no argument."""
        if isinstance(part, ast.Call) and not part.args and not part.keywords:
            return answer_key(self.eval(part.func, frame, state))
        return None

    def _predicate_test(self, call: ast.Call, frame: Frame, state: State) -> ast.expr | None:
        """The test a call of a one-line predicate (`def active(b): return b.counts is not None`) returns, written
        over the call's own arguments (`fb.counts is not None`); None where the callee is not such a function of
        the tree, an argument is not a name or attribute, or the test reads anything but its parameters."""
        if not isinstance(call.func, (ast.Name, ast.Attribute)) or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        func = plain(self.eval(call.func, frame, state))
        node = func.node if isinstance(func, Function) else None
        body = [b for b in node.body if not _is_docstring(b)] if isinstance(node, ast.FunctionDef) else []
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return None
        params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
        given = dict(zip(params, call.args, strict=False))  # more arguments than parameters: see below
        given.update({k.arg: k.value for k in call.keywords if k.arg is not None})
        if len(given) != len(call.args) + len(call.keywords) or not all(_is_reference(v) for v in given.values()):
            return None
        test = body[0].value
        if any(isinstance(n, ast.Name) and n.id not in given for n in walked(test)):
            return None
        key = (id(call), id(test))
        if key not in _INLINED:  # kept, with the nodes it is for: the evaluation may key what it learns by node
            _INLINED[key] = (call, test, _Substitute(given).visit(copy.deepcopy(test)))
        return _INLINED[key][2]

    def assign(self, target: ast.expr, value: Any, frame: Frame, state: State, stmt: ast.AST) -> None:
        if self.choices is not None and isinstance(target, (ast.Name, ast.Attribute)):  # at any depth
            attribute = isinstance(target, ast.Attribute)
            self.choices.forget(target.attr if attribute else target.id, frame, attribute)
        if isinstance(target, ast.Name):
            hop = f"`{target.id}` ({self.place(frame, stmt)})"
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
            if isinstance(target.value, ast.Name) and target.value.id in state.locals and _no_identity(base):
                # a local holding an object the evaluation does not know (`md = self._metadata(fb)`): from here on
                # it is one object known by that name, so what is written to it is read back through it
                base = Sym(f"<{target.value.id} at {getattr(stmt, 'lineno', 0)}>", labels_of(base))
                state.locals[target.value.id] = base
            if target.attr in self.watch_attrs:
                self.record("assign", frame.module, stmt, target.attr, state.path, (base, value))
            self.store(base, target.attr, value, state, stmt)
        elif isinstance(target, ast.Subscript):
            held = self.eval(target.value, frame, state)
            base = plain(held)
            key = plain(self.eval(target.slice, frame, state))
            in_list = isinstance(base, list) and isinstance(key, int) and -len(base) <= key < len(base)
            if (isinstance(base, dict) and known(key)) or in_list:
                base[key] = value
            elif (
                isinstance(target.value, (ast.Name, ast.Attribute))
                and (base is UNKNOWN or isinstance(base, Abstract))
                and (labels_of(value) or maybe_of(value))
            ):
                # an item written into an array the evaluation cannot see into, held in a local or in an object's
                # field (`self.kv_lens_cpu[:bs] = lens`): the array now holds what it was given (a padded count
                # written as the last offset), so what is read from it is derived from that
                if isinstance(target.value, ast.Name):
                    state.locals[target.value.id] = _holding(held, value)
                else:
                    self.assign(target.value, _holding(held, value), frame, state, stmt)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, UNKNOWN, frame, state, stmt)

    def store(self, base: Any, attr: str, value: Any, state: State, node: ast.AST | None = None) -> None:
        base = plain(base)
        if isinstance(base, Obj) and attr not in base.pinned:
            self._written.append(base)
            state.writes[(id(base), attr)] = value
            if node is not None:
                base.nodes[attr] = node
        elif isinstance(base, Sym):
            state.writes[(base.name, attr)] = value
        elif isinstance(base, OneOf):
            # one of a few objects (`metadata = a or b`): whichever it is holds the value now, as a read through
            # the same name says (the others are taken to as well: which one is not known)
            for option in base.options:
                if option is not None:
                    self.store(option, attr, value, state, node)

    def _unpack(self, targets: list[ast.expr], value: Any, frame: Frame, state: State, stmt: ast.AST) -> None:
        for target, item in zip(targets, self._unpacked(targets, value), strict=True):
            if isinstance(target, ast.Starred):
                self.assign(target.value, item if isinstance(item, list) else Many(item), frame, state, stmt)
            else:
                self.assign(target, item, frame, state, stmt)

    def _unpacked_or_unknown(self, targets: list[ast.expr], value: Any) -> list[Any]:
        try:
            return self._unpacked(targets, value)
        except PathEnds:  # a deferred unpacking that would raise: read later, it is no value
            return [UNKNOWN] * len(targets)

    def _unpacked(self, targets: list[ast.expr], value: Any) -> list[Any]:
        """What each target of `a, *b, c = value` gets (a starred one: a list, or the element of an unknown)."""
        inner = plain(value)
        if isinstance(inner, Obj) and inner.cls is not None and self.named_tuple(inner.cls):
            inner = tuple(self.iterate(value) or ())  # a `NamedTuple` unpacks as the tuple of its fields
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
            raise PathEnds(exceptions.python_lineage("ValueError"))  # too many or not enough values to unpack
        if values is None and isinstance(inner, (set, frozenset)) and self.raise_ends_path and star is None:
            if len(inner) != len(targets):
                raise PathEnds(exceptions.python_lineage("ValueError"))
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


LOOP_ROUNDS = 3  # a loop over an unknown sequence runs its body until its locals settle, at most this often


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
    return [n for sub in walked(node) if isinstance(sub, ast.Name) for n in state.env.get(sub.id, ())]


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


def _holding(array: Any, item: Any) -> Any:
    """An array of unknown content after `item` was written into it: derived from what it was and from the item."""
    inner = plain(array)
    length = inner.length if isinstance(inner, Abstract) else None
    labels, maybe = labels_of(array) | labels_of(item), maybe_of(array) | maybe_of(item)
    return Abstract(bounded(labels), bounded(maybe - labels), why_of(array) + why_of(item), length)


def _changed(before: State, after: State) -> set[str]:
    """The locals a round of a loop changed (`after` joins `before`, so it holds every local `before` does)."""
    return {k for k in after.locals if not _same_shape(before.locals.get(k, UNKNOWN), after.locals[k])}


def _same_shape(a: Any, b: Any) -> bool:
    if same_value(a, b):
        return True
    if isinstance(a, OneOf) or isinstance(b, OneOf):
        return False  # a few known values: more of them is a change (a count that grows each round)
    if is_unknown(a) and is_unknown(b):
        return labels_of(a) == labels_of(b) and maybe_of(a) == maybe_of(b)
    return False


def _pattern_names(pattern: ast.pattern) -> set[str]:
    names = set()
    for sub in walked(pattern):
        name = getattr(sub, "name", None) or getattr(sub, "rest", None)
        if isinstance(name, str):
            names.add(name)
    return names


# Each predicate call's test written over its arguments, with the call and the test it was made from.
_INLINED: dict[tuple[int, int], tuple[ast.Call, ast.expr, ast.expr]] = {}


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_reference(node: ast.expr) -> bool:
    """A name, or attributes of one: evaluated again where it is written into a test, it reads the same value."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


class _Substitute(ast.NodeTransformer):
    """A predicate's parameters replaced by the caller's arguments."""

    def __init__(self, given: dict[str, ast.expr]) -> None:
        self.given = given

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return copy.deepcopy(self.given[node.id]) if node.id in self.given else node


# Statements whose only flow onward is the next statement: a raise inside one may be taken as a path of its own.
_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)


_FALSE_VALUES = (False, None, 0, "")


def _no_identity(value: Any) -> bool:
    """An unknown that is no object the evaluation can write into: nothing known of it but where it came from."""
    inner = plain(value)
    return anonymous(inner) and not (isinstance(inner, Abstract) and (inner.maybe or inner.why))
