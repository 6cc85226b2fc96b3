"""Raises that do not end their path (`Semantics.raise_ends_path=False`): each is recorded as an outcome and
evaluation goes on past it, so an `except` is judged against the raises recorded in its `try` body: the ones a
handler surely catches are marked caught, one it may catch is caught under a named condition, and the handler runs
on the paths of what it caught; a bare `raise` there, or another raise, makes what it caught a failure again."""

from __future__ import annotations

import ast
from typing import Any

from specguard.evaluation import exceptions
from specguard.evaluation.paths import Cond, Flow, Frame, Outcome, State, chain
from specguard.evaluation.values import UNKNOWN
from specguard.program.tree import SourceTree, message_of


class RecordedRaises:
    """The statements whose meaning changes when a raise is only recorded: `raise` and `try`."""

    tree: SourceTree
    outcomes: list[Outcome]
    _reraise: list[list[Outcome]]  # what the handler being run caught (for a bare `raise`)

    def exec_block(self, stmts: list[ast.stmt], frame: Frame, state: State) -> Flow:
        raise NotImplementedError

    def cond(self, node: ast.AST, module: Any) -> Cond:
        raise NotImplementedError

    def record(self, kind: str, module: Any, node: Any, message: str, path: frozenset, detail: Any = None) -> None:
        raise NotImplementedError

    def fork(self, state: State, path: frozenset | None = None) -> State:
        raise NotImplementedError

    def merge_states(self, states: list[State]) -> State | None:
        raise NotImplementedError

    def _recorded_raise(self, stmt: ast.Raise, frame: Frame, state: State) -> Flow:
        # Recorded, and evaluation goes on as if it had not fired: each validation is judged on its own (a value
        # this evaluation holds stale, e.g. one an uninlined call would have set, must not make an unrelated raise
        # hide the rest of the function).
        if stmt.exc is not None:
            self.record("raise", frame.module, stmt, message_of(stmt.exc), state.path)
        elif self._reraise:  # a bare `raise` in a handler: what it caught fails again, on this path
            for caught in self._reraise[-1]:
                self.outcomes.append(Outcome(caught.site, caught.path | state.path, caught.detail))
        return Flow(normal=state)

    def _recorded_try(self, stmt: Any, frame: Frame, state: State) -> Flow:
        start = len(self.outcomes)
        flow = self.exec_block(stmt.body, frame, state)
        flow = self._handle(stmt.handlers, self.outcomes[start:], flow, frame, state)
        if flow.normal is not None:
            flow = chain(flow, self.exec_block(stmt.orelse, frame, flow.normal))
        if flow.normal is not None and stmt.finalbody:
            flow = chain(flow, self.exec_block(stmt.finalbody, frame, flow.normal))
        return flow

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
                inner = self.fork(flow.normal or state, path)
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
        return Flow(self.merge_states(ends), flow.returns, flow.breaks, flow.continues)

    def _raised_again(self, caught: list[Outcome], handled: list[Outcome]) -> None:
        """A handler that raises (`raise Other(...) from exc`, or a failing assert) fails again on that path: what it
        caught is a failure there, under another name. A bare `raise` was already counted (see `_reraise`)."""
        sites = {id(o.site) for o in caught}
        for again in handled:
            if again.site.kind in ("raise", "assert") and not again.caught and id(again.site) not in sites:
                self.outcomes += [Outcome(o.site, o.path | again.path, o.detail) for o in caught]
