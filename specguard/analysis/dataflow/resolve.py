"""Per checked file: stage-one summaries followed across calls and classes, into the `FlowFacts` its rules get.

For each class the file defines (the caller says which), the methods of its lineage are resolved in the class's
own context: `self.m(...)` reaches the first definition of `m` from the class up (as Python dispatches), and
`super().m(...)` the first one above the defining class. Instance attributes are what any method of the lineage
writes into them, computed to a fixpoint since one attribute can be written from another (or from itself).
Module-level functions are found through the defining module's imports and the index (re-exports followed).

Bounds, so that recursion always ends: a call chain is followed `MAX_DEPTH` calls deep, a function already being
resolved (mutual recursion) contributes nothing to itself, and attributes get `MAX_ROUNDS` rounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from specguard.analysis.dataflow.calls import Passed, apply, bound_values
from specguard.analysis.dataflow.values import (
    ANY,
    ATTR,
    CALL,
    EMPTY,
    PARAM,
    PARAM_ORIGIN,
    FlowFacts,
    FlowSpec,
    FunctionFlow,
    Item,
    Value,
    extend,
    items_of,
    join,
    rekey,
    step,
    value_of,
)

if TYPE_CHECKING:
    from specguard.analysis.summary import ModuleSummary

MAX_DEPTH = 4  # calls followed from a checked function into helpers of helpers
MAX_ROUNDS = 4  # rounds of the instance-attribute fixpoint

Found = tuple["ModuleSummary", "str | None", FunctionFlow]  # defining module, class (None: a function), summary


class Project(Protocol):
    def class_chain(self, summary: ModuleSummary, class_name: str) -> list[tuple[ModuleSummary, str]]: ...

    def lookup(self, qualified: str, near: ModuleSummary) -> tuple[ModuleSummary, str] | None: ...

    def flows(self, summary: ModuleSummary) -> dict[str, FunctionFlow | None]: ...


class _Class:
    """One class whose methods run on `self`: its lineage, and what its instance attributes may hold."""

    def __init__(self, project: Project, lineage: list[tuple[ModuleSummary, str]]) -> None:
        self.project = project
        self.lineage = lineage
        self.attributes: dict[str, Value] = {}

    def method(self, name: str, above: str | None = None) -> Found | None:
        chain = self.lineage
        if above is not None:
            owners = [cls for _, cls in chain]
            chain = chain[owners.index(above) + 1 :] if above in owners else []
        for module, cls in chain:
            flows = self.project.flows(module)
            key = f"{cls}.{name}"
            if key in flows:  # the first definition wins, even one with nothing to say (None)
                return (module, cls, flows[key]) if flows[key] is not None else None
        return None

    def methods(self) -> list[Found]:
        seen: dict[str, Found | None] = {}
        for module, cls in self.lineage:
            for key, flow in self.project.flows(module).items():
                owner, _, name = key.partition(".")
                if owner == cls and name and name not in seen:
                    seen[name] = (module, cls, flow) if flow is not None else None
        return [found for found in seen.values() if found is not None]


class FlowResolver:
    def __init__(self, project: Project, spec: FlowSpec) -> None:
        self.project = project
        self.spec = spec
        self.wanted = spec.sinks  # callees whose signature a rule needs even when they return nothing tracked
        self._memo: dict[tuple[tuple[int, str, str, bool], int], Value] = {}
        self._active: set[tuple[int, str, str, bool]] = set()

    def file_flows(self, summary: ModuleSummary, classes: Iterable[str]) -> FlowFacts:
        """What the checked functions of this module may call: the methods of the given classes' lineages
        (`self.m` as "Cls.m", `super().m` as "super(Cls).m"), the module's functions, and the imported
        functions its code passes tracked values to. Kept when they return something tracked, or when a rule
        wants their signature."""
        functions: dict[str, FunctionFlow] = {}
        attributes: dict[str, tuple[Item, ...]] = {}

        def keep(key: str, owner: _Class | None, found: Found | None) -> None:
            if found is None:
                return
            module, cls, flow = found
            returns = self._returns(owner if cls else None, module, cls, flow, 1)
            if returns or flow.qualname.rpartition(".")[2] in self.wanted:
                functions[key] = replace(flow, returns=items_of(returns), attributes=(), calls=())

        owners = {name: self._class(self.project.class_chain(summary, name)) for name in sorted(classes)}
        for name, owner in owners.items():
            attributes |= {f"{name}.{a}": items_of(v) for a, v in owner.attributes.items() if v}
        callees = {local for local, target in summary.imports.items() if target.rpartition(".")[2] in self.wanted}
        for key, flow in self.project.flows(summary).items():
            cls = key.partition(".")[0] if "." in key else None
            if flow is None or (cls is not None and cls not in owners):
                continue
            for call in flow.calls:
                method = call.callee.rpartition(".")[2]
                if call.callee.startswith("self.") and cls is not None:
                    keep(f"{cls}.{method}", owners[cls], owners[cls].method(method))
                elif call.callee.startswith("super().") and cls is not None:
                    keep(f"super({cls}).{method}", owners[cls], owners[cls].method(method, above=cls))
                elif ("." not in call.callee and call.callee in summary.functions) or call.passes_tracked:
                    callees.add(call.callee)
        for callee in sorted(callees):
            keep(summary.resolve(callee), None, self._callee(callee, None, summary, None))
        return FlowFacts(tuple(sorted(functions.items())), tuple(sorted(attributes.items())))

    # ---- classes ----------------------------------------------------------------------------------------

    def _class(self, lineage: list[tuple[ModuleSummary, str]]) -> _Class:
        owner = _Class(self.project, lineage)
        methods = owner.methods()
        for _ in range(MAX_ROUNDS):
            self._memo.clear()  # method results depend on the attributes of the previous round
            written: dict[str, Value] = {}
            for module, cls, flow in methods:
                for attribute, items in flow.attributes:
                    value = self._detach(self._expand(items, owner, module, cls, flow, 0, params=False), flow)
                    if value:
                        written[attribute] = join(written.get(attribute, EMPTY), value)
            stable = written.keys() == owner.attributes.keys() and all(
                written[a].keys() == owner.attributes[a].keys() for a in written
            )
            owner.attributes = written
            if stable:
                break
        self._memo.clear()
        return owner

    def _detach(self, value: Value, flow: FunctionFlow) -> Value:
        """An attribute value as any method sees it: the writer's parameters are unknown, so only what is
        tracked regardless of the caller stays (the writer's own sources, its annotated parameters)."""
        out: list[Item] = []
        for item in value.values():
            if not item.origin.startswith(PARAM_ORIGIN):
                out.append(replace(item, origin=ANY, span=None))
                continue
            if item.label == PARAM:
                continue
            labels = flow.intrinsic_labels(item.origin[len(PARAM_ORIGIN) :])
            if item.label in labels or any(o in labels for o in self.spec.owners.get(item.label, ())):
                out.append(replace(item, origin=ANY, span=None))
        return value_of(out)

    # ---- functions --------------------------------------------------------------------------------------

    def _callee(self, text: str, owner: _Class | None, module: ModuleSummary, cls: str | None) -> Found | None:
        if text.startswith("self."):
            return owner.method(text[len("self.") :]) if owner is not None else None
        if text.startswith("super()."):
            return owner.method(text[len("super().") :], above=cls) if owner is not None and cls else None
        found = self.project.lookup(module.resolve(text), module)
        if found is None or found[1] not in found[0].functions:  # not in the project, or a class
            return None
        target = self.project.flows(found[0]).get(found[1])
        return (found[0], None, target) if target is not None else None

    def _returns(
        self,
        owner: _Class | None,
        module: ModuleSummary,
        cls: str | None,
        flow: FunctionFlow,
        depth: int,
        params: bool = True,
    ) -> Value:
        """What `flow` returns with its calls and attribute reads resolved, in terms of its own parameters
        (without `params`: for a caller that passes nothing tracked, so what only they would carry is skipped)."""
        if depth > MAX_DEPTH:
            return EMPTY
        key = (id(owner), module.module, flow.qualname, params)
        if key in self._active:  # recursion: what it returns through itself adds nothing new
            return EMPTY
        if (key, depth) in self._memo:
            return self._memo[(key, depth)]
        self._active.add(key)
        try:
            value = self._expand(flow.returns, owner, module, cls, flow, depth, params)
        finally:
            self._active.discard(key)
        self._memo[(key, depth)] = value
        return value

    def _expand(
        self,
        items: Iterable[Item],
        owner: _Class | None,
        module: ModuleSummary,
        cls: str | None,
        flow: FunctionFlow,
        depth: int,
        params: bool = True,
    ) -> Value:
        """The items with calls and attribute reads resolved. Without `params` (an attribute's value, where the
        writer's parameters are unknown) a call that passes only those is not followed."""
        out: Value = EMPTY
        for item in items:
            if item.label == ATTR:
                held = owner.attributes.get(item.origin, EMPTY) if owner is not None else EMPTY
                held = rekey(held, item.key) if item.key is not None else held
                out = join(out, extend(held, *item.steps))
            elif item.label == CALL:
                result = self._call_result(item, owner, module, cls, flow, depth, params)
                out = join(out, extend(result, *item.steps))
            else:
                out = join(out, value_of([item]))
        return out

    def _call_result(
        self,
        item: Item,
        owner: _Class | None,
        module: ModuleSummary,
        cls: str | None,
        flow: FunctionFlow,
        depth: int,
        params: bool,
    ) -> Value:
        index = int(item.origin[1:])
        if index >= len(flow.calls):
            return EMPTY
        call = flow.calls[index]
        args = [
            Passed(None, a.keyword, a.star, self._expand(a.items, owner, module, cls, flow, depth + 1, params))
            for a in call.args
        ]
        local = call.callee.startswith(("self.", "super().")) or module.resolve(call.callee).startswith(
            f"{module.module}."
        )
        passed = [i for a in args for i in a.value.values() if params or i.label != PARAM]
        if not (local or passed):
            return EMPTY  # a function of another module is followed only when it is passed something tracked
        found = self._callee(call.callee, owner, module, cls)
        if found is None:
            return EMPTY
        callee_module, callee_class, target = found
        context = owner if callee_class else None
        returns = self._returns(context, callee_module, callee_class, target, depth + 1, bool(passed))
        if not returns:
            return EMPTY
        resolved = replace(target, returns=items_of(returns))
        passed_to = bound_values(target.signature, args)
        result = apply(self.spec, resolved, passed_to, step(f"returned by `{target.qualname}`"))
        return rekey(result, item.key) if item.key is not None else result
