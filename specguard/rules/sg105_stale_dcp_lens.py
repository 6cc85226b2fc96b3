"""SG105 stale-dcp-lens: the shared helper builds draft metadata with stale DCP rank-local lengths."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from specguard.analysis.cst_tools import keyword, kids, scopes
from specguard.rules.base import Diagnostic, Limit, Rule, RuleContext


def _parameters(function: cst.FunctionDef) -> set[str]:
    p = function.params
    return {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)}


def _names(node: cst.CSTNode) -> set[str]:
    found = {node.value} if isinstance(node, cst.Name) else set()
    for child in kids(node):
        found |= _names(child)
    return found


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    if not ctx.facts.sink_accepts_dcp:
        return
    dcp_param = ctx.pack.metadata.dcp_param or ""
    for scope in scopes(ctx.module):
        if scope.class_name not in ctx.facts.base_classes or scope.name not in ctx.pack.speculators.shared_helpers:
            continue
        params = _parameters(scope.function)
        prepared = False
        for call in ctx.calls_in(scope.function):
            if ctx.calls_function(call, ctx.pack.dcp.prepare):
                prepared = True
            elif ctx.calls_function(call, ctx.pack.metadata.sink) and not prepared:
                handed_in = keyword(call, dcp_param)
                if handed_in is not None and _names(handed_in.value) & params:
                    continue
                yield Diagnostic(
                    call,
                    f"shared helper `{scope.qualname}` calls `{ctx.callee(call)}` without recomputing DCP "
                    f"rank-local sequence lengths (no `{ctx.pack.dcp.prepare[0]}` before it and no "
                    f"`{dcp_param}` from the caller); draft steps then attend with the target's stale lengths",
                    scope.qualname,
                )


def _sink_defined_here(facts, pack, mentions) -> bool:  # type: ignore[no-untyped-def]
    return facts.sink_accepts_dcp and bool(facts.base_classes)


RULE = Rule(
    code="SG105",
    name="stale-dcp-lens",
    title="shared helper builds draft metadata with stale DCP rank-local lengths",
    summary=(
        "Flags the speculator base's shared metadata helper when it calls the sink without recomputing DCP "
        "rank-local sequence lengths: no call of the DCP preparation on any path before the sink and no "
        "`dcp_local_seq_lens` handed in by the caller. Applies only where the sink accepts `dcp_local_seq_lens`."
    ),
    why=(
        "Draft steps advance and rewind their own global sequence lengths after sampling and rejection, so the "
        "rank-local lengths the target model prepared are stale by the time the draft attends. Under decode "
        "context parallelism the draft then reads the wrong KV range on every rank."
    ),
    bad="""
        def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
            ...

        class DraftModelSpeculator:
            def _build_attn_metadata(self, num_reqs, num_tokens):
                return build_attn_metadata(
                    num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                )
    """,
    good="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

        def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
            ...

        class DraftModelSpeculator:
            def _build_attn_metadata(self, num_reqs, num_tokens):
                dcp_local_seq_lens = None
                if self.dcp_size > 1:
                    dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                        self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                        self.dcp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                    )
                return build_attn_metadata(
                    num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                    dcp_local_seq_lens=dcp_local_seq_lens,
                )
    """,
    check=check,
    applies=_sink_defined_here,
    limits=(
        Limit(
            "Only the order of the calls in the helper is read: a preparation anywhere before the sink counts, "
            "whether or not its result reaches the sink.",
            missed="""
                from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

                def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
                    ...

                class DraftModelSpeculator:
                    def _build_attn_metadata(self, num_reqs, num_tokens):
                        prepare_dcp_local_seq_lens(self.other_lens, self.input_buffers.seq_lens, num_reqs)
                        return build_attn_metadata(
                            num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                        )
            """,
        ),
    ),
    references=(
        'vllm-project/vllm#54277 ("Enable FlashInfer MLA for DSpark drafting", in vLLM 0.29.0): the shared draft '
        "metadata helper recomputes the rank-local DCP sequence lengths from the draft's "
        "own global lengths before every build; vLLM 0.28.0's `DraftModelSpeculator._build_draft_attn_metadata` "
        "does not.",
    ),
)
