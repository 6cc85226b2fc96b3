"""Fork draft worker: DP-attention aware eager draft paths."""
from __future__ import annotations

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_worker_common import prepare_for_draft
from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

from blindsg2 import plan_utils
from blindsg2.plan_utils import pad_for_dp, plan_and_seal


class DPAwareEagleDraftWorker(EagleDraftWorker):
    """EagleDraftWorker with extra eager paths used by our DP deployment."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._replan_ok = False
        self._safe_replan = True

    # expect: SG106
    def draft_eager_dp(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_forward(forward_batch)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        # keep shapes aligned with the other DP ranks
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        return self.draft_forward(forward_batch)

    # expect: clean
    def draft_eager_dp_postpad(self, forward_batch: ForwardBatch):
        if forward_batch.forward_mode.is_idle():
            return self.draft_forward(forward_batch)
        forward_batch.prepare_mlp_sync_batch(self.draft_runner)
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        return self.draft_forward(forward_batch)

    # expect: SG106
    def run_extend_sealed(self, forward_batch: ForwardBatch):
        plan_and_seal(self.draft_attn_backend, forward_batch)
        if forward_batch.global_num_tokens_cpu is not None:
            # DP attention: runner forward pads to the global max
            return self.draft_runner.forward(forward_batch).logits_output
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_extend_replannable(self, forward_batch: ForwardBatch):
        plan_utils.plan_and_seal_replannable(self.draft_attn_backend, forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def run_extend_legacy_skip(self, forward_batch: ForwardBatch, dp_synced: bool):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        if not dp_synced:
            forward_batch.global_num_tokens_cpu = None
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=True)
        return out.logits_output

    # expect: clean
    def run_extend_legacy_noskip(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        out = self.draft_runner.forward(forward_batch, skip_attn_backend_init=False)
        return out.logits_output

    # expect: SG106
    def run_extend_flagged(self, forward_batch: ForwardBatch):
        backend = self.draft_attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=self._replan_ok)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def run_extend_flagged_safe(self, forward_batch: ForwardBatch):
        backend = self.draft_attn_backend
        backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=self._safe_replan)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def run_extend_aliased(self, fb: ForwardBatch):
        plan = self.draft_attn_backend.init_forward_metadata
        seal = fb.mark_forward_metadata_ready
        plan(fb)
        seal(False)
        runner = self.draft_runner
        return runner.forward(fb).logits_output

    # expect: SG106
    def draft_raw_model(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        pad_for_dp(forward_batch, self.draft_runner)
        return plan_utils.run_model_raw(self.draft_runner, forward_batch)

    # expect: SG106
    def draft_raw_model_via_helper(self, forward_batch: ForwardBatch):
        try:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
        finally:
            forward_batch.mark_forward_metadata_ready()
        return plan_utils.padded_raw_forward(self.draft_runner, forward_batch)

    # expect: clean
    def draft_unmarked(self, forward_batch: ForwardBatch):
        # Warm the backend's plan cache; the runner forward plans for real.
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: clean
    def draft_local_only(self, batch):
        draft_input = batch.spec_info
        forward_batch, can_run_graph, _ = prepare_for_draft(
            draft_input,
            self.req_to_token_pool,
            batch,
            self.cuda_graph_runner,
            self.draft_runner,
            self.topk,
            self.speculative_num_steps,
        )
        if can_run_graph:
            return self.cuda_graph_runner.execute(forward_batch)
        if forward_batch.global_num_tokens_cpu is None:
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return self.draft_runner.forward(forward_batch).logits_output
        return self.draft_runner.forward(forward_batch).logits_output

    # expect: SG106
    def draft_multi_round(self, forward_batch: ForwardBatch, rounds: int):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        outputs = []
        for _ in range(rounds):
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            outputs.append(self.draft_forward(forward_batch))
        return outputs

    # expect: clean
    def draft_multi_round_replan(self, forward_batch: ForwardBatch, rounds: int):
        outputs = []
        for _ in range(rounds):
            if forward_batch.global_num_tokens_cpu is not None:
                forward_batch.prepare_mlp_sync_batch(self.draft_runner)
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            outputs.append(self.draft_forward(forward_batch))
        return outputs

    # expect: clean
    def draft_graph_replay(self, forward_batch: ForwardBatch):
        runner = self.cuda_graph_runner
        if runner is not None and runner.can_run_graph(forward_batch):
            # replay loads the batch into static buffers with its own plan
            return runner.execute(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output
