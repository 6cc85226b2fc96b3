"""EAGLE draft-decode step with the fork's DP-idle handling.

When any DP rank is idle the active ranks cannot agree on a graph bucket, so
the fork runs the multi-step draft eagerly on every rank for that round.
"""

from __future__ import annotations

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.speculative.eagle_worker_common import (
    build_eagle_verify_input,
    prepare_for_draft,
)
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg10.common.gates import mlp_sync_padding_expected


class DpIdleAwareDraftWorker(EagleDraftWorker):
    def _prepare_draft_batch(self, batch: ScheduleBatch):
        return prepare_for_draft(
            batch.spec_info,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
            target_translator=self.target_worker.model_runner.kv_index_translator,
            num_draft_tokens=self.speculative_num_draft_tokens,
        )

    def _to_verify_input(self, batch, draft_out, kv_loc_plan):
        parent_list, top_scores_index, draft_tokens, draft_probs = draft_out
        verify_input = build_eagle_verify_input(
            batch,
            batch.spec_info,
            parent_list,
            top_scores_index,
            draft_tokens,
            draft_probs,
            target_worker=self.target_worker,
            topk=self.topk,
            num_steps=self.speculative_num_steps,
            num_draft_tokens=self.speculative_num_draft_tokens,
            tree_mask_mode=self.tree_mask_mode,
            device=self.device,
        )
        if kv_loc_plan is not None:
            verify_input.kv_loc_plan = kv_loc_plan
            verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
        return verify_input

    # expect: SG106
    def draft_eager_when_dp_idle(self, batch: ScheduleBatch):
        forward_batch, can_run_graph, kv_loc_plan = self._prepare_draft_batch(batch)
        global_tokens = forward_batch.original_global_num_tokens_cpu
        if global_tokens is not None and min(global_tokens) == 0:
            # An idle DP rank replays no graph; keep every rank eager this round.
            can_run_graph = False
        if can_run_graph:
            draft_out = self.cuda_graph_runner.execute(forward_batch)
        else:
            if (
                not forward_batch.forward_mode.is_idle()
                and self.speculative_num_steps > 1
            ):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            draft_out = self.draft_forward(forward_batch)
        return self._to_verify_input(batch, draft_out, kv_loc_plan)

    # expect: clean
    def draft_dp_guarded(self, batch: ScheduleBatch):
        forward_batch, can_run_graph, kv_loc_plan = self._prepare_draft_batch(batch)
        if can_run_graph:
            draft_out = self.cuda_graph_runner.execute(forward_batch)
        elif forward_batch.forward_mode.is_idle() or self.speculative_num_steps == 1:
            # Idle ranks and 1-step drafts never read per-step draft metadata.
            draft_out = self.draft_forward(forward_batch)
        elif mlp_sync_padding_expected():
            raise NotImplementedError(
                "eager multi-step EAGLE draft under MLP-sync padding: the "
                "per-step draft metadata would describe the unpadded batch; "
                "enable the draft CUDA graph for this batch size"
            )
        else:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            draft_out = self.draft_forward(forward_batch)
        return self._to_verify_input(batch, draft_out, kv_loc_plan)
