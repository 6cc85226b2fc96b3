"""A DFlash-style block drafter: one draft forward proposes ``block_size - 1``
tokens per request from an anchor token followed by mask tokens.

The drafter owns a small draft ModelRunner (built by the worker) and reuses
the target's req_to_token rows, like ``DFlashWorkerV2``.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from blindsg33.spec.steps import sample_block

logger = logging.getLogger(__name__)


class BlockDrafter:
    def __init__(
        self,
        draft_model_runner: ModelRunner,
        block_size: int,
        mask_token_id: int,
        num_refine_iters: int = 1,
    ):
        self.draft_model_runner = draft_model_runner
        self.block_size = int(block_size)
        self.mask_token_id = int(mask_token_id)
        self.num_refine_iters = int(num_refine_iters)
        self.device = draft_model_runner.device
        self._block_spec_info = make_draft_block_spec_info(
            draft_token_num=self.block_size, device=self.device
        )

    # -- staging -----------------------------------------------------------
    def _block_ids(self, anchor_ids: torch.Tensor) -> torch.Tensor:
        bs = anchor_ids.shape[0]
        block = torch.full(
            (bs, self.block_size),
            self.mask_token_id,
            dtype=torch.long,
            device=anchor_ids.device,
        )
        block[:, 0] = anchor_ids
        return block

    def _stage(self, batch: ScheduleBatch, anchor_ids: torch.Tensor, mode: ForwardMode):
        bs = len(batch.seq_lens)
        batch.input_ids = self._block_ids(anchor_ids).flatten()
        batch.spec_info = self._block_spec_info
        batch.forward_mode = ForwardMode.IDLE if batch.forward_mode.is_idle() else mode
        if mode.is_draft_extend_v2():
            batch.prefix_lens = batch.seq_lens.to(torch.int32)
            batch.extend_lens = torch.full(
                (bs,), self.block_size, dtype=torch.int32, device=self.device
            )
            batch.extend_num_tokens = bs * self.block_size
        return ForwardBatch.init_new(
            batch,
            self.draft_model_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )

    # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 draft block — block forward staged as TARGET_VERIFY; load_batch when the decode graph fits, else planned on the runner backend; marked either way
    # expect: clean
    def propose_block_verify_mode(
        self, batch: ScheduleBatch, anchor_ids: torch.Tensor
    ) -> torch.Tensor:
        forward_batch = self._stage(batch, anchor_ids, ForwardMode.TARGET_VERIFY)
        graph_runner = self.draft_model_runner.decode_cuda_graph_runner
        if graph_runner and graph_runner.can_run_graph(forward_batch):
            graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        elif not forward_batch.forward_mode.is_idle():
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_model_runner.forward(forward_batch)
        return sample_block(out.logits_output.next_token_logits, self.block_size)

    # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 draft block — block forward staged as DRAFT_EXTEND_V2 from the scheduled batch, planned on the runner backend and marked
    # expect: SG106
    def propose_block_extend_mode(
        self, batch: ScheduleBatch, anchor_ids: torch.Tensor
    ) -> torch.Tensor:
        forward_batch = self._stage(batch, anchor_ids, ForwardMode.DRAFT_EXTEND_V2)
        if not forward_batch.forward_mode.is_idle():
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        out = self.draft_model_runner.forward(forward_batch)
        return sample_block(out.logits_output.next_token_logits, self.block_size)

    # idiom: speculative/dflash_worker_v2.py DFlashWorkerV2 draft block (hand-built ForwardBatch(...)) — DRAFT_EXTEND_V2 batch constructed field by field, no DP token counts, planned and marked
    # expect: clean
    def propose_block_handbuilt(
        self,
        batch: ScheduleBatch,
        anchor_ids: torch.Tensor,
        positions: torch.Tensor,
        out_cache_loc: torch.Tensor,
    ) -> torch.Tensor:
        bs = len(batch.seq_lens)
        block_ids = self._block_ids(anchor_ids)
        seq_lens = batch.seq_lens + self.block_size
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.DRAFT_EXTEND_V2,
            batch_size=bs,
            input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=seq_lens,
            out_cache_loc=out_cache_loc,
            seq_lens_sum=int(seq_lens.sum().item()),
            positions=positions,
            extend_seq_lens=torch.full(
                (bs,), self.block_size, dtype=torch.int32, device=self.device
            ),
            extend_prefix_lens=batch.seq_lens.to(torch.int32),
            extend_seq_lens_cpu=[self.block_size] * bs,
            extend_num_tokens=bs * self.block_size,
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        out = self.draft_model_runner.forward(forward_batch)
        return sample_block(out.logits_output.next_token_logits, self.block_size)

    # idiom: dllm/algorithm/base.py _run_sync — block refined over a fixed canvas: the first forward runs unmarked, the batch is marked only after it, later iterations reuse that plan
    # expect: clean
    def refine_block(self, batch: ScheduleBatch, anchor_ids: torch.Tensor) -> torch.Tensor:
        forward_batch = self._stage(batch, anchor_ids, ForwardMode.DRAFT_EXTEND_V2)
        out = self.draft_model_runner.forward(forward_batch)
        proposal = sample_block(out.logits_output.next_token_logits, self.block_size)
        if forward_batch.forward_mode.is_idle():
            return proposal
        forward_batch.mark_forward_metadata_ready()
        for _ in range(self.num_refine_iters - 1):
            proposal[:, 0] = anchor_ids
            forward_batch.input_ids = proposal.flatten()
            out = self.draft_model_runner.forward(forward_batch)
            proposal = sample_block(out.logits_output.next_token_logits, self.block_size)
        return proposal

    # idiom: dllm/algorithm/base.py _run_sync — block refined over a fixed canvas, planned and marked before the first forward, every iteration reuses that plan
    # expect: SG106
    def refine_block_primed(
        self, batch: ScheduleBatch, anchor_ids: torch.Tensor
    ) -> torch.Tensor:
        forward_batch = self._stage(batch, anchor_ids, ForwardMode.DRAFT_EXTEND_V2)
        if not forward_batch.forward_mode.is_idle():
            self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        proposal: Optional[torch.Tensor] = None
        for it in range(self.num_refine_iters):
            if proposal is not None:
                proposal[:, 0] = anchor_ids
                forward_batch.input_ids = proposal.flatten()
            out = self.draft_model_runner.forward(forward_batch)
            proposal = sample_block(out.logits_output.next_token_logits, self.block_size)
        return proposal

    # idiom: speculative/dflash_worker_v2.py forward_batch_generation idle-rank branch — an idle DP rank still enters the draft forward; the IDLE batch is planned and marked first
    # expect: clean
    def propose_block_idle(self, batch: ScheduleBatch) -> None:
        assert batch.forward_mode.is_idle()
        batch.input_ids = torch.empty((0,), dtype=torch.long, device=self.device)
        batch.spec_info = self._block_spec_info
        forward_batch = ForwardBatch.init_new(
            batch,
            self.draft_model_runner,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            return_hidden_states_before_norm=False,
        )
        self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready()
        self.draft_model_runner.forward(forward_batch)
