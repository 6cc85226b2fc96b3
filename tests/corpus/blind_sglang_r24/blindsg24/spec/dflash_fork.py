"""DFlash worker patches: verify planning and the draft block forward."""

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class ForkDFlashWorkerV2(DFlashWorkerV2):
    # idiom: sglang/srt/speculative/dflash_worker_v2.py DFlashWorkerV2 verify (prepare_for_verify(defer_metadata_init=attn_dp_enabled))
    # expect: clean
    def verify_block(self, batch: ScheduleBatch, verify_input):
        verify_forward_batch, _ = verify_input.prepare_for_verify(
            batch,
            self.target_worker,
            # Under DP attention ModelRunner plans after its padding.
            defer_metadata_init=get_parallel().attn_dp_enabled,
        )
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
        )

    # idiom: sglang/srt/speculative/dflash_worker_v2.py DFlashWorkerV2 draft block (hand-built ForwardBatch, never MLP-synced)
    # expect: clean
    def run_draft_block_preplanned(
        self,
        batch: ScheduleBatch,
        block_ids: torch.Tensor,
        positions: torch.Tensor,
        out_cache_loc: torch.Tensor,
        draft_seq_lens: torch.Tensor,
        draft_seq_lens_cpu: torch.Tensor,
    ):
        bs = len(batch.seq_lens)
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=draft_seq_lens,
            out_cache_loc=out_cache_loc,
            seq_lens_sum=int(draft_seq_lens_cpu.sum()),
            seq_lens_cpu=draft_seq_lens_cpu,
            positions=positions,
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        graph_runner = self.draft_model_runner.decode_cuda_graph_runner
        if not (graph_runner and graph_runner.can_run_graph(forward_batch)):
            # Eager block, rank-local: no global_num_tokens, so no DP
            # padding follows the plan.
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        with torch.inference_mode():
            draft_out = self.draft_model_runner.forward(forward_batch)
        return draft_out.logits_output
