"""DFlash-style block drafting in the fork: one draft forward proposes a
whole block (``block_size`` rows per request).

Unlike upstream (which hand-builds a TARGET_VERIFY-shaped batch outside the DP
sync), the fork builds the block batch from the synchronized schedule batch so
every DP rank runs the draft together; the batch is DRAFT_EXTEND_V2-shaped.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput


class DFlashDraftBlockRunner:
    def __init__(self, draft_tp_worker: TpModelWorker, block_size: int):
        self.draft_tp_worker = draft_tp_worker
        self.draft_model_runner: ModelRunner = draft_tp_worker.model_runner
        self.block_size = int(block_size)

    def _block_batch(
        self,
        batch: ScheduleBatch,
        block_ids: torch.Tensor,
        target_hidden: Optional[torch.Tensor],
    ) -> ForwardBatch:
        bs = len(batch.seq_lens)
        block = self.block_size
        if batch.seq_lens_cpu is not None:
            # Host bound = committed prefix + one block.
            batch.seq_lens_cpu = batch.seq_lens_cpu + block
            batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
        batch.spec_info = EagleDraftExtendInput(
            hidden_states=target_hidden,
            num_tokens_per_req=block,
            num_tokens_for_logprob_per_req=block,
        )
        batch.input_ids = block_ids.flatten()
        batch.prefix_lens = batch.seq_lens.to(torch.int32)
        batch.extend_lens = torch.full(
            (bs,), block, dtype=torch.int32, device=batch.seq_lens.device
        )
        batch.extend_num_tokens = bs * block
        if not batch.forward_mode.is_idle():
            batch.forward_mode = ForwardMode.DRAFT_EXTEND_V2
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_model_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        forward_batch.seq_lens = forward_batch.seq_lens + block
        return forward_batch

    def _snapshot(self, batch: ScheduleBatch):
        return batch.seq_lens_cpu, batch.seq_lens_sum, batch.forward_mode, batch.spec_info

    def _restore(self, batch: ScheduleBatch, saved) -> None:
        batch.seq_lens_cpu, batch.seq_lens_sum, batch.forward_mode, batch.spec_info = saved

    # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 draft block (host-bound backup / restore around the draft forward)
    # expect: SG106
    def run_block(
        self,
        batch: ScheduleBatch,
        block_ids: torch.Tensor,
        target_hidden: Optional[torch.Tensor] = None,
    ):
        saved = self._snapshot(batch)
        try:
            forward_batch = self._block_batch(batch, block_ids, target_hidden)
            if not forward_batch.forward_mode.is_idle():
                self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            draft_out = self.draft_model_runner.forward(forward_batch)
        finally:
            self._restore(batch, saved)
        return draft_out.logits_output

    # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 draft block + forward_batch_info.py ForwardBatch.prepare_mlp_sync_batch before the plan
    # expect: clean
    def run_block_padded(
        self,
        batch: ScheduleBatch,
        block_ids: torch.Tensor,
        target_hidden: Optional[torch.Tensor] = None,
    ):
        saved = self._snapshot(batch)
        runner = self.draft_model_runner
        try:
            forward_batch = self._block_batch(batch, block_ids, target_hidden)
            synced = forward_batch.global_num_tokens_cpu is not None
            if synced:
                forward_batch.prepare_mlp_sync_batch(runner)
            if not forward_batch.forward_mode.is_idle():
                runner.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            logits_output = runner.eager_runner.execute(forward_batch)
            if synced:
                forward_batch.post_forward_mlp_sync_batch(logits_output)
        finally:
            self._restore(batch, saved)
        return logits_output

    # idiom: speculative/dflash_worker_v2.py (0.5.18) target_worker.forward_batch_generation(..., skip_attn_backend_init=True)
    # expect: SG106
    def run_block_via_worker(
        self,
        batch: ScheduleBatch,
        block_ids: torch.Tensor,
        target_hidden: Optional[torch.Tensor] = None,
    ):
        saved = self._snapshot(batch)
        try:
            forward_batch = self._block_batch(batch, block_ids, target_hidden)
            if not forward_batch.forward_mode.is_idle():
                self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            result = self.draft_tp_worker.forward_batch_generation(
                batch=None,
                forward_batch=forward_batch,
                skip_attn_backend_init=True,
            )
        finally:
            self._restore(batch, saved)
        return result.logits_output

    # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 draft block via TpModelWorker.forward_batch_generation (no skip flag)
    # expect: clean
    def run_block_via_worker_unmarked(
        self,
        batch: ScheduleBatch,
        block_ids: torch.Tensor,
        target_hidden: Optional[torch.Tensor] = None,
    ):
        saved = self._snapshot(batch)
        try:
            forward_batch = self._block_batch(batch, block_ids, target_hidden)
            if not forward_batch.forward_mode.is_idle():
                # Warm-up plan only (JITs the wrapper for this shape); the
                # worker's forward plans again on the padded batch.
                self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            result = self.draft_tp_worker.forward_batch_generation(
                batch=None,
                forward_batch=forward_batch,
            )
        finally:
            self._restore(batch, saved)
        return result.logits_output
