"""SG101 metadata-outside-helper: a speculator builds attention metadata without the shared helper."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from specguard.evaluation.hooks import Hooks
from specguard.evaluation.values import NOT_HANDLED, UNKNOWN, Abstract, Bound, Function, Method, Obj, plain
from specguard.findings import Judgement
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, report_judgements, speculator_module
from specguard.rules.judging import (
    OutOfBudget,
    Question,
    Scope,
    aliases,
    annotated_parameter,
    bind_parameters,
    called_text,
    callee,
    leading_call,
    reaching_imports,
    reaching_methods,
    unknown_parameter,
    words,
    writes_of,
)


class _Builds(Hooks):
    """Calls written in the function whose callee, as evaluated, is the sink (through an alias, a partial, an
    attribute the instance was given) or a builder method of an object whose class is known: a runtime build unless
    the capture keyword is True."""

    def __init__(self, q: Question, scope: Scope | None, record: bool = True) -> None:
        self.q, self.scope, self.record = q, scope, record
        self.sinks = set(q.pack.metadata.sink)
        self.methods = set(q.pack.metadata.builder_methods)
        self.helpers = set(q.pack.speculators.shared_helpers)
        # the call in the function -> (that call, what it builds with, the build a helper it calls makes, if any)
        self.builds: dict[int, tuple[ast.Call, str, str | None]] = {}

    def call(
        self, ev: Any, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.Call, frame: Any, state: Any
    ) -> Any:
        method = builder_method(ev, func, self.methods)
        target = callee(func) if method is None else None
        if method is None and target is not None and target.method and target.name in self.helpers:
            return UNKNOWN  # the shared helpers are where the sink belongs: what they build is not judged here
        if method is None and (target is None or target.method or target.name not in self.sinks):
            return NOT_HANDLED
        if method is None and target is not None:
            keyword = self.q.pack.metadata.capture_keyword or ""
            passed = {**dict(target.partial_kwargs), **kwargs}
            if keyword in passed and ev.truth(passed[keyword], frame, state) is True:
                return UNKNOWN  # a capture-time build
        self._record(ev, node, frame, method or target.name)  # type: ignore[union-attr]
        return UNKNOWN  # a metadata build: not followed into

    def _record(self, ev: Any, node: ast.Call, frame: Any, name: str) -> None:
        """A build the function makes: written in it, or made by a function of the tree it calls (then it is the
        call written in the function that leads there that bypasses the shared helpers)."""
        found = leading_call(self.q, self.scope, ev, node, frame) if self.record and self.scope is not None else None
        if found is not None and found[1]:
            self.builds.setdefault(id(node), (node, name, None))
        elif found is not None:
            call, where = found[0], f"{name}` ({ev.place(frame, node)})"
            self.builds.setdefault(id(call), (call, called_text(call), where))

    def reads(self, ev: Any, func: Any) -> frozenset[str] | None:
        target = callee(func)
        if target is None or target.method or target.name not in self.sinks:
            return None
        return frozenset({self.q.pack.metadata.capture_keyword or ""})

    def instance_attribute(self, ev: Any, obj: Any, attr: str) -> Any:
        if obj.label != "self" or obj.cls is None:
            return NOT_HANDLED
        return self.q.instance_attributes("SG101").value(obj.cls, attr, None, self._writes)

    def _writes(self, function: Function, me: Obj, writes: dict | None) -> list[tuple[Any, dict]]:
        return writes_of(self.q, _Builds(self.q, None, record=False), function, me, unknown_parameter, writes)


def builder_method(ev: Any, func: Any, methods: set[str]) -> str | None:
    """The pack's `Class.method` a call reaches: a method of an object whose class (or an ancestor) the evaluation
    knows, as an instance it built or one an annotation promised."""
    func = plain(func)
    receiver = plain(func.receiver) if isinstance(func, Method) else None
    if isinstance(receiver, Abstract) and receiver.kind is not None:
        cls, name = receiver.kind, func.name
    elif isinstance(func, Bound) and func.func.owner is not None:
        cls, name = func.func.owner, func.func.name
    else:
        return None
    return next((f"{k.name}.{name}" for k in ev.tree.ancestors(cls) if f"{k.name}.{name}" in methods), None)


def _in_shared_helper(q: Question, scope: Scope) -> bool:
    """The shared helpers count only where the speculator base itself defines them."""
    return scope.class_name in q.facts.base_classes and scope.node.name in q.pack.speculators.shared_helpers


def judge(q: Question) -> Iterator[Judgement]:
    methods = {m.rpartition(".")[2] for m in q.pack.metadata.builder_methods}
    names = aliases(q, set(q.pack.metadata.sink))
    names |= reaching_imports(q, names | methods)
    called = re.compile(r"\.(?:" + "|".join(map(re.escape, sorted(methods))) + r")\s*\(") if methods else None
    either = re.compile("|".join(p.pattern for p in (words(names), called) if p is not None))
    names |= reaching_methods(q, either)
    for scope in q.scopes:
        speculator = (
            q.facts.is_speculator_module if scope.class_name is None else scope.class_name in q.facts.speculator_classes
        )
        # a preselection by reading: a name of the sink, or a builder method called on something
        mentioned = scope.mentions(names) or (called is not None and called.search(scope.text) is not None)
        if not speculator or _in_shared_helper(q, scope) or not mentioned:
            continue
        hooks = _Builds(q, scope)
        ev = q.evaluator(hooks)
        try:
            ev.run(
                scope.function, bind_parameters(scope.function, q.self_value(scope), annotated_parameter(ev), q.program)
            )
        except (OutOfBudget, RecursionError):
            yield q.out_of_budget("SG101", scope)
        helpers = q.pack.speculators.shared_helpers
        for node, name, via in sorted(hooks.builds.values(), key=lambda item: (item[0].lineno, item[0].col_offset)):
            how = f"calls `{name}`, which builds with `{via};" if via else f"calls `{name}` directly;"
            yield q.judgement(
                "SG101",
                scope,
                node,
                f"`{scope.qualname}` {how} build draft attention metadata through the "
                f"speculator base's shared helper (`{'` or `'.join(helpers[:2])}`)",
            )


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    for judgement in report_judgements("SG101", ctx):
        yield Diagnostic(None, judgement.message, judgement.scope, judgement.span)


RULE = Rule(
    code="SG101",
    name="metadata-outside-helper",
    title="speculator builds attention metadata outside the shared helper",
    summary=(
        "Flags a speculator method, or a module-level function of a speculator module, that calls the "
        "attention-metadata sink (`build_attn_metadata`) anywhere but in the shared helpers defined by the "
        "speculator base, however it reaches it: by name, through a local alias, a `functools.partial`, an "
        "attribute the instance was given, or a function of the tree it calls. A builder method of another object "
        "(`group.build_metadata(...)`, `group.get_metadata_builder().build(...)`) is such a build too. Capture-time "
        "builders, whose `for_cudagraph_capture` is True, are exempt."
    ),
    why=(
        "Every speculator must agree with `query_start_loc` on how many tokens the batch has. vLLM fixed the "
        "DFlash DP>1 startup crash (FlashInfer: `q.shape[0] (52) does not match qo_indptr[-1] (48)`) by routing "
        "every speculator through one helper in the base class that picks the padded count only for FULL CUDA "
        "graphs. A speculator that builds metadata itself bypasses that choice and the DCP length recompute."
    ),
    analysis=(
        "The rule evaluates each call written in the function: its callee is what the evaluation finds there "
        "(an import under any name, a local or instance attribute assigned the sink, a partial of it, the "
        "function a module attribute names), and a method of some other object that shares the sink's name is "
        "not the sink. A method call is a build where the object's class, or an ancestor, and the method are one "
        "of the pack's `builder_methods`; the class is what the evaluation knows of the object: built in the tree, "
        "or promised by an annotation (`init_attn_backend(...) -> tuple[list[list[AttentionGroup]], ...]`, a "
        "field's, a parameter's). A build made by a function of the tree the method calls (not a shared helper) "
        "is reported at that call. The capture keyword is evaluated too (a local, a partial's bound argument): a "
        "build is exempt only where it is True on every path.",
    ),
    bad="""
        import functools

        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc):
                return build_attn_metadata(attn_groups=self.attn_groups, num_reqs=num_reqs)  # SG101

            def propose_steps(self, num_reqs, steps):
                build = functools.partial(build_attn_metadata, attn_groups=self.attn_groups)
                return [build(num_reqs=num_reqs, step=step) for step in range(steps)]  # SG101: a partial

            def warmup(self, num_reqs, capture=False):
                return build_attn_metadata(num_reqs=num_reqs, for_cudagraph_capture=capture)  # SG101: maybe not
    """,
    good="""
        import functools

        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc):
                return self._build_uniform_attn_metadata(
                    num_reqs=num_reqs, batch_desc=batch_desc, num_query_per_req=1,
                    seq_lens_cpu_upper_bound=self.seq_lens_cpu_upper_bound, step=1,
                )

            def capture(self, num_reqs):
                capturing = True
                build = functools.partial(build_attn_metadata, for_cudagraph_capture=capturing)
                return build(attn_groups=self.attn_groups, num_reqs=num_reqs)  # a capture-time builder
    """,
    check=check,
    applies=speculator_module,
    judge=judge,
    limits=(
        Limit(
            "Only calls written in the function are judged: the sink handed to a function the evaluation cannot "
            "read (of a package outside the analyzed tree, which builds the metadata itself) is not followed.",
            missed="""
                from myfork.builders import run_builder
                from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs):
                        return run_builder(build_attn_metadata, attn_groups=self.attn_groups, num_reqs=num_reqs)
            """,
        ),
        Limit(
            "A callee found by a name computed at run time (`getattr` with a name the evaluation cannot know) is "
            "unknown, so it is not the sink.",
            missed="""
                from vllm.v1.worker.gpu import attn_utils
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs, kind):
                        build = getattr(attn_utils, f"build_{kind}_metadata")
                        return build(attn_groups=self.attn_groups, num_reqs=num_reqs)
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#56181 ("Fix DP token padding in dflash attention metadata", in vLLM 0.30.0): every '
        "speculator builds its draft metadata through `DraftModelSpeculator._build_attn_metadata` or "
        "`_build_uniform_attn_metadata` (`vllm/v1/worker/gpu/spec_decode/speculator.py`).",
        'vllm-project/vllm#55458 ("Exclude DP token padding from draft attention metadata"): the same DP padding, '
        "fixed first in the autoregressive draft decode.",
    ),
)
