"""SG102 helper-override: a speculator subclass overrides a shared metadata helper."""

from __future__ import annotations

from collections.abc import Iterator

from specguard.analysis.cst_tools import scopes
from specguard.rules.base import Diagnostic, Rule, RuleContext, speculator_module


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    helpers = ctx.pack.speculators.shared_helpers
    for scope in scopes(ctx.module):
        cls = scope.class_name
        if cls is None or cls not in ctx.facts.speculator_classes or cls in ctx.facts.base_classes:
            continue
        if scope.name in helpers:
            yield Diagnostic(
                scope.function.name,
                f"speculator `{cls}` overrides the shared metadata helper `{scope.name}`; pass what differs "
                f"as arguments to the base helper instead of overriding it",
                scope.qualname,
            )


RULE = Rule(
    code="SG102",
    name="helper-override",
    title="speculator subclass overrides a shared metadata helper",
    summary=(
        "Flags a speculator subclass that overrides one of the shared metadata helpers defined by the "
        "speculator base (`_build_attn_metadata`, `_build_uniform_attn_metadata`, or the legacy "
        "`_build_draft_attn_metadata`). Classes that are not speculators may define methods of those names."
    ),
    why=(
        "The shared helper is the single place that decides the token count (padded for FULL CUDA graphs, real "
        "otherwise) and recomputes DCP rank-local lengths. vLLM 0.28.0's DFlash override of "
        "`_build_draft_attn_metadata` forwarded the caller's DP-padded count and made DFlash crash at startup "
        "with DP>1; the fix deleted the override."
    ),
    bad="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def _build_draft_attn_metadata(self, num_reqs, num_reqs_padded, num_tokens_padded, **kwargs):
                return super()._build_draft_attn_metadata(num_reqs, num_reqs_padded, num_tokens_padded, **kwargs)
    """,
    good="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc):
                return self._build_uniform_attn_metadata(
                    num_reqs=num_reqs, batch_desc=batch_desc, num_query_per_req=self.num_query_per_req,
                    seq_lens_cpu_upper_bound=self.seq_lens_cpu_upper_bound, step=1,
                )
    """,
    check=check,
    applies=speculator_module,
)
