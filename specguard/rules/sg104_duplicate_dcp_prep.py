"""SG104 duplicate-dcp-prep: a speculator subclass prepares DCP rank-local lengths itself."""

from __future__ import annotations

from collections.abc import Iterator

from specguard.analysis.cst_tools import scopes
from specguard.rules.base import Diagnostic, Rule, RuleContext, speculator_module
from specguard.rules.sg101_metadata_outside_helper import is_capture_builder_call


def check(ctx: RuleContext) -> Iterator[Diagnostic]:
    prepare, sink = ctx.pack.dcp.prepare, ctx.pack.metadata.sink
    for scope in scopes(ctx.module):
        cls = scope.class_name
        if cls is None:
            if not ctx.facts.is_speculator_module:
                continue
        elif cls not in ctx.facts.speculator_classes or cls in ctx.facts.base_classes:
            continue
        calls = ctx.calls_in(scope.function)
        if cls is None and any(ctx.calls_function(c, sink) and is_capture_builder_call(c, ctx) for c in calls):
            continue  # a capture-time builder prepares its own dummy batch
        for call in calls:
            if ctx.calls_function(call, prepare):
                yield Diagnostic(
                    call,
                    f"`{scope.qualname}` calls `{ctx.callee(call)}` itself; the speculator base's shared helper "
                    f"already recomputes DCP rank-local lengths, so this duplicates (and can diverge from) it",
                    scope.qualname,
                )


RULE = Rule(
    code="SG104",
    name="duplicate-dcp-prep",
    title="speculator subclass prepares DCP rank-local lengths itself",
    summary=(
        "Flags a speculator subclass, or a module-level function of a speculator module that is not a "
        "capture-time builder, that calls the DCP local-length preparation (`prepare_dcp_local_seq_lens`) "
        "itself instead of leaving it to the shared helper."
    ),
    why=(
        "Under decode context parallelism the shared helper recomputes rank-local sequence lengths from the "
        "draft's current global lengths. A subclass that repeats the preparation runs it twice per step and can "
        "disagree with the helper (different buffers, padding or interleave), as DFlash did before vLLM removed "
        "its copy."
    ),
    bad="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc, query_start_loc_np):
                prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens, num_reqs,
                    self.block_tables.cp_size, self.block_tables.cp_rank, self.block_tables.cp_interleave,
                )
                return self._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    good="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDFlashSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc, query_start_loc_np):
                # the shared helper recomputes DCP rank-local lengths itself
                return self._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    check=check,
    applies=speculator_module,
)
