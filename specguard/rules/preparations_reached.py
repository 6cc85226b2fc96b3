"""SG104's judge (`sg104_duplicate_dcp_prep` is the rule): a speculator method that runs the DCP preparation
through other code (a partial or a method stored on the instance, a property, a generator, a function of another
module). What a method writes itself is SG104's check on libcst, with its fix; this evaluates what the method
reaches."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from specguard.evaluation.hooks import Hooks
from specguard.evaluation.paths import Frame
from specguard.evaluation.values import NOT_HANDLED, UNKNOWN, Function, Obj
from specguard.findings import Judgement
from specguard.program.ast_tools import dotted
from specguard.rules.judging import (
    OutOfBudget,
    Question,
    Scope,
    aliases,
    bind_parameters,
    called_text,
    callee,
    leading_call,
    reaching_functions,
    reaching_imports,
    reaching_methods,
    unknown_parameter,
    words,
    writes_of,
)


class _Preparations(Hooks):
    """The preparations a method runs, each at the call written in the method that leads to it."""

    def __init__(self, q: Question, scope: Scope | None) -> None:
        self.q, self.scope = q, scope
        self.prepare = set(q.pack.dcp.prepare)
        self.helpers = set(q.pack.speculators.shared_helpers)
        self.bases = set(q.pack.speculators.bases)
        # the call in the method -> (that call, how the method reaches the preparation, where it runs)
        self.found: dict[int, tuple[ast.Call, str, str]] = {}

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Frame, state: Any
    ) -> Any:
        target = callee(func)
        if target is None:
            return NOT_HANDLED
        if target.method and target.name in self.helpers:
            return UNKNOWN  # the shared helpers are where the preparation belongs
        if target.method or target.name not in self.prepare:
            return NOT_HANDLED
        if self.scope is None or (frame.owner is not None and frame.owner.name in self.bases):
            return UNKNOWN  # the speculator base's own methods prepare for it
        found = leading_call(self.q, self.scope, ev, node, frame)
        if found is not None and not (found[1] and _written(self.q, node, self.prepare)):  # written so: the check's
            call, where = found[0], "" if found[1] else ev.place(frame, node)
            self.found.setdefault(id(call), (call, called_text(call), where))
        return UNKNOWN

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        if obj.label != "self" or obj.cls is None:
            return NOT_HANDLED
        return self.q.instance_attributes("SG104").value(obj.cls, attr, None, self._writes)

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        return writes_of(self.q, _Preparations(self.q, None), function, me, unknown_parameter, writes)


def _written(q: Question, node: ast.Call, names: set[str]) -> bool:
    """A call of the preparation by its (imported, aliased) name or through its module, as libcst reads it."""
    name = dotted(node.func)
    if name is None or name.startswith(("self.", "cls.")):
        return False
    head = name.partition(".")[0]
    if "." in name and (head not in q.facts.import_map or head in q.facts.object_imports):
        return False
    return q.facts.resolve(name).rpartition(".")[2] in names


def judge(q: Question) -> Iterator[Judgement]:
    prepare = set(q.pack.dcp.prepare)
    names = aliases(q, prepare) | reaching_imports(q, prepare)
    names |= reaching_functions(q, words(names)) | reaching_methods(q, words(names))
    for scope in q.scopes:
        if scope.class_name not in q.facts.speculator_classes or scope.class_name in q.facts.base_classes:
            continue
        if scope.node.name in q.pack.speculators.capture_methods:  # a dummy batch's lengths, prepared to capture
            continue
        if not scope.mentions(names - prepare - {scope.node.name}):  # one called by its name is the check's
            continue
        hooks = _Preparations(q, scope)
        try:
            q.evaluator(hooks).run(
                scope.function, bind_parameters(scope.function, q.self_value(scope), unknown_parameter, q.program)
            )
        except (OutOfBudget, RecursionError):
            yield q.out_of_budget("SG104", scope)
            continue
        for node, through, where in sorted(hooks.found.values(), key=lambda item: (item[0].lineno, item[0].col_offset)):
            runs = f"which runs `{q.pack.dcp.prepare[0]}` ({where})" if where else "the DCP preparation,"
            yield q.judgement(
                "SG104",
                scope,
                node,
                f"`{scope.qualname}` calls `{through}`, {runs} itself; the speculator base's shared helper "
                f"already recomputes DCP rank-local lengths, so this duplicates (and can diverge from) it",
            )
