"""UNO-style self-drafting (target model + draft LoRA) in the fork.

The draft pass runs the target runner with the UNO LoRA bound; the fork keeps
a one-token-per-request DECODE draft and plans it under the LoRA-bound
attention context.
"""

from __future__ import annotations

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


class UnoDraftFork:
    def __init__(self, model_runner: ModelRunner, uno_lora_id: str):
        self.model_runner = model_runner
        self.uno_lora_id = uno_lora_id
        self.lora_manager = model_runner.lora_manager

    def _eager(self, forward_batch: ForwardBatch) -> bool:
        graph = self.model_runner.decode_cuda_graph_runner
        return graph is None or not graph.can_run_graph(forward_batch)

    def _bind_lora(self, batch_size: int) -> None:
        self.lora_manager.prepare_lora_token_segments(
            lora_ids=[self.uno_lora_id] * batch_size,
            segment_lens=[1] * batch_size,
        )

    def _synced_draft_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        # The schedule batch went through the scheduler's MLP-sync gather.
        batch.forward_mode = ForwardMode.DECODE
        return ForwardBatch.init_new(
            batch,
            self.model_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )

    def _local_draft_batch(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        out_cache_loc: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        req_pool_indices: torch.Tensor,
    ) -> ForwardBatch:
        # Built by hand, rank-local: no DP token gather is attached, so the
        # runner will not pad it.
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=len(seq_lens),
            input_ids=input_ids.reshape(-1),
            req_pool_indices=req_pool_indices,
            seq_lens=seq_lens,
            out_cache_loc=out_cache_loc.reshape(-1),
            seq_lens_sum=int(seq_lens_cpu.sum()),
            seq_lens_cpu=seq_lens_cpu,
            positions=positions.reshape(-1),
            spec_algorithm=SpeculativeAlgorithm.UNO,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        self.model_runner.kv_index_translator.bind_own_plan(forward_batch)
        return forward_batch

    # idiom: speculative/uno_worker_v2.py UnoWorkerV2._run_draft_block (LoRA-bound attention context)
    # expect: SG106
    def run_draft_block(self, batch: ScheduleBatch):
        forward_batch = self._synced_draft_batch(batch)
        backend = self.model_runner.attn_backend
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            self._bind_lora(forward_batch.batch_size)
            if self._eager(forward_batch) and not forward_batch.forward_mode.is_idle():
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            result = self.model_runner.forward(forward_batch)
            self.lora_manager.reset_lora_batch()
        return torch.argmax(result.logits_output.next_token_logits, dim=-1)

    # idiom: speculative/uno_worker_v2.py UnoWorkerV2._make_forward_batch (hand-built, never DP-synchronized)
    # expect: clean
    def run_draft_block_local(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        out_cache_loc: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: torch.Tensor,
        req_pool_indices: torch.Tensor,
    ):
        forward_batch = self._local_draft_batch(
            input_ids, positions, out_cache_loc, seq_lens, seq_lens_cpu, req_pool_indices
        )
        backend = self.model_runner.attn_backend
        with forward_context(
            ForwardContext(attn_backend=backend), forward_batch=forward_batch
        ):
            self._bind_lora(forward_batch.batch_size)
            if self._eager(forward_batch):
                backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            result = self.model_runner.forward(forward_batch)
            self.lora_manager.reset_lora_batch()
        return torch.argmax(result.logits_output.next_token_logits, dim=-1)
