"""A checked function's view of the project: calls answered from the file's `FlowFacts`, names from its imports."""

from __future__ import annotations

import ast

from specguard.analysis.ast_tools import callee_text, module_function
from specguard.analysis.dataflow.calls import Passed, apply, bound_values
from specguard.analysis.dataflow.values import EMPTY, FlowSpec, FunctionFlow, Signature, Value, step, value_of
from specguard.analysis.dataflow.walker import Hooks
from specguard.analysis.index import FileFacts


class ProjectHooks(Hooks):
    """The `Hooks` a rule's walk starts from (subclass it for `on_call`/`on_store`)."""

    def __init__(self, facts: FileFacts, spec: FlowSpec, class_name: str | None, self_name: str | None) -> None:
        self.facts = facts
        self.spec = spec
        self.class_name = class_name
        self.self_name = self_name

    def callee(self, func: ast.expr) -> str | None:
        return module_function(func, self.self_name, self.facts.import_map, self.facts.resolve)

    def key(self, func: ast.expr) -> str | None:
        """How `FlowFacts` names the function a call reaches."""
        text = callee_text(func, self.self_name)
        if text is None:
            return None
        for prefix, form in (("self.", "{cls}.{name}"), ("super().", "super({cls}).{name}")):
            if text.startswith(prefix):
                return form.format(cls=self.class_name, name=text[len(prefix) :]) if self.class_name else None
        return self.facts.resolve(text) if self.callee(func) is not None else None

    def flow(self, func: ast.expr) -> FunctionFlow | None:
        key = self.key(func)
        return self.facts.flows.function_map.get(key) if key is not None else None

    def signature(self, func: ast.expr) -> Signature | None:
        flow = self.flow(func)
        return flow.signature if flow is not None else None

    def call(self, node: ast.Call, args: list[Passed]) -> Value | None:
        flow = self.flow(node.func)
        if flow is None or not flow.returns:
            return None
        return apply(self.spec, flow, bound_values(flow.signature, args), step(f"returned by `{flow.qualname}`"))

    def self_attribute(self, name: str) -> Value:
        if self.class_name is None:
            return EMPTY
        return value_of(self.facts.flows.attribute_map.get(f"{self.class_name}.{name}", ()))
