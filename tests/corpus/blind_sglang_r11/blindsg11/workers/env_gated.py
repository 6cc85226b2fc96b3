"""Draft extend with an opt-in host-side pre-plan.

SGLANG_DRAFT_EXTEND_PREPLAN (default on) moves the draft-extend attention
plan out of ModelRunner.forward so it overlaps the verify epilogue.
"""

from __future__ import annotations

from sglang.srt.model_executor.cuda_graph_config import cuda_graph_fully_disabled
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
from sglang.srt.utils.common import get_bool_env_var, require_mlp_sync

from blindsg11.runtime.plan_helpers import preplan


class EnvGatedDraftWorker(EagleDraftWorker):
    # expect: SG106
    def draft_extend_env(self, forward_batch: ForwardBatch):
        if get_bool_env_var("SGLANG_DRAFT_EXTEND_PREPLAN", "true") and not (
            forward_batch.forward_mode.is_idle()
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_env_no_dp(self, forward_batch: ForwardBatch):
        if (
            get_bool_env_var("SGLANG_DRAFT_EXTEND_PREPLAN", "true")
            and not require_mlp_sync()
            and not forward_batch.forward_mode.is_idle()
        ):
            self.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_extend_graph_disabled(self, forward_batch: ForwardBatch):
        # Without CUDA graphs nothing else plans this batch ahead of time;
        # do it here so the verify epilogue overlaps it.
        if cuda_graph_fully_disabled():
            preplan(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_extend_graph_disabled_unsynced(self, forward_batch: ForwardBatch):
        if cuda_graph_fully_disabled() and forward_batch.global_num_tokens_cpu is None:
            preplan(self.draft_runner.attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output
