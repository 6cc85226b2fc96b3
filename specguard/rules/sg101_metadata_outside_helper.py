"""SG101 metadata-outside-helper: a speculator builds attention metadata without the shared helper."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from specguard.analysis.cst_tools import is_true, keyword, scopes
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext, speculator_module


def is_capture_builder_call(call: cst.Call, ctx: RuleContext) -> bool:
    arg = keyword(call, ctx.pack.metadata.capture_keyword or "")
    return arg is not None and is_true(arg.value)


def in_shared_helper(class_name: str | None, function: str, ctx: RuleContext) -> bool:
    """The shared helpers count only where the speculator base itself defines them."""
    return class_name in ctx.facts.base_classes and function in ctx.pack.speculators.shared_helpers


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    sink = ctx.pack.metadata.sink
    for scope in scopes(ctx.module):
        if not ctx.speculator_scope(scope.class_name) or in_shared_helper(scope.class_name, scope.name, ctx):
            continue
        for call in ctx.calls_in(scope.function):
            if ctx.calls_function(call, sink) and not is_capture_builder_call(call, ctx):
                yield Diagnostic(
                    call,
                    f"`{scope.qualname}` calls `{ctx.callee(call)}` directly; build draft attention metadata "
                    f"through the speculator base's shared helper "
                    f"(`{'` or `'.join(ctx.pack.speculators.shared_helpers[:2])}`)",
                    scope.qualname,
                )


RULE = Rule(
    code="SG101",
    name="metadata-outside-helper",
    title="speculator builds attention metadata outside the shared helper",
    summary=(
        "Flags a speculator method, or a module-level function of a speculator module, that calls the "
        "attention-metadata sink (`build_attn_metadata`) anywhere but in the shared helpers defined by the "
        "speculator base. Capture-time builders that pass `for_cudagraph_capture=True` are exempt."
    ),
    why=(
        "Every speculator must agree with `query_start_loc` on how many tokens the batch has. vLLM fixed the "
        "DFlash DP>1 startup crash (FlashInfer: `q.shape[0] (52) does not match qo_indptr[-1] (48)`) by routing "
        "every speculator through one helper in the base class that picks the padded count only for FULL CUDA "
        "graphs. A speculator that builds metadata itself bypasses that choice and the DCP length recompute."
    ),
    bad="""
        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc):
                return build_attn_metadata(attn_groups=self.attn_groups, num_reqs=num_reqs)
    """,
    good="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc):
                return self._build_uniform_attn_metadata(
                    num_reqs=num_reqs, batch_desc=batch_desc, num_query_per_req=1,
                    seq_lens_cpu_upper_bound=self.seq_lens_cpu_upper_bound, step=1,
                )
    """,
    check=check,
    applies=speculator_module,
    limits=(
        Limit(
            "The sink is recognised where it is called, by the name it was imported under or through its module: "
            "a call through a local variable or `getattr` is not followed.",
            missed="""
                from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
                from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

                class MyDraftSpeculator(DraftModelSpeculator):
                    def propose(self, num_reqs):
                        build = build_attn_metadata
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
