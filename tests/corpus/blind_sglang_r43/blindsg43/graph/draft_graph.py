"""Draft-decode graph runner with an eager fallback.

The upstream runner only replays; the worker decides what to do when a batch
does not fit a captured shape.  This fork keeps that decision next to the
runner so the multi-step draft backend is planned in one place.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Optional, Tuple

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)

logger = logging.getLogger(__name__)

DraftOutputs = Tuple[
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
]


class ForkEagleDraftGraphRunner(EAGLEDraftCudaGraphRunner):
    """EAGLE draft runner that owns its eager fallback."""

    def __init__(self, eagle_worker, **kwargs):
        super().__init__(eagle_worker, **kwargs)
        self.num_eager_fallbacks = 0

    def _eager_draft(self, forward_batch: ForwardBatch) -> DraftOutputs:
        self.num_eager_fallbacks += 1
        return self.eagle_worker.draft_forward(forward_batch)

    # expect: SG106
    def execute_or_eager(self, forward_batch: ForwardBatch) -> DraftOutputs:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch)
        if (
            not forward_batch.forward_mode.is_idle()
            and self.speculative_num_steps > 1
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._eager_draft(forward_batch)

    # expect: clean
    def execute_or_fail(self, forward_batch: ForwardBatch) -> DraftOutputs:
        if self.can_run_graph(forward_batch):
            return self.execute(forward_batch)
        if self.require_mlp_sync:
            raise RuntimeError(
                "eager multi-step draft is not supported with MLP sync; "
                f"batch of {forward_batch.batch_size} exceeds the captured "
                f"draft graphs (max_bs={self.max_bs})"
            )
        if (
            not forward_batch.forward_mode.is_idle()
            and self.speculative_num_steps > 1
        ):
            self.draft_attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self._eager_draft(forward_batch)

    # expect: SG106
    def eager_with_restore(self, forward_batch: ForwardBatch) -> DraftOutputs:
        """Eager draft that leaves the caller's positions / cache locs intact."""
        positions_backup = forward_batch.positions.clone()
        out_cache_loc_backup = forward_batch.out_cache_loc
        try:
            if not forward_batch.forward_mode.is_idle():
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            return self._eager_draft(forward_batch)
        finally:
            forward_batch.positions = positions_backup
            forward_batch.out_cache_loc = out_cache_loc_backup

    # expect: clean
    def replay_padded(self, forward_batch: ForwardBatch) -> DraftOutputs:
        """Replay on the nearest captured bucket; metadata is planned for it."""
        buffers = self.buffers
        raw_bs = forward_batch.batch_size
        bs = self._pad_to_bucket(raw_bs, self.capture_bs)
        raw_num_token = raw_bs * self.captured_req_width
        num_tokens = bs * self.captured_req_width

        if bs != raw_bs:
            buffers.seq_lens.fill_(self.seq_len_fill_value)
            buffers.req_pool_indices.zero_()
            buffers.positions.zero_()
            buffers.out_cache_loc.zero_()
            buffers.topk_p.zero_()
            buffers.topk_index.zero_()
            if buffers.hidden_states is not None:
                buffers.hidden_states.zero_()

        buffers.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
        buffers.req_pool_indices[:raw_bs].copy_(forward_batch.req_pool_indices)
        buffers.positions[:raw_num_token].copy_(forward_batch.positions)
        buffers.out_cache_loc[: raw_num_token * self.speculative_num_steps].copy_(
            forward_batch.out_cache_loc
        )
        buffers.topk_p[:raw_bs].copy_(forward_batch.spec_info.topk_p)
        buffers.topk_index[:raw_bs].copy_(forward_batch.spec_info.topk_index)
        if (
            buffers.hidden_states is not None
            and forward_batch.spec_info.hidden_states is not None
        ):
            buffers.hidden_states[:raw_bs].copy_(forward_batch.spec_info.hidden_states)

        seq_lens_sum = forward_batch.seq_lens_sum
        if seq_lens_sum is not None:
            seq_lens_sum = seq_lens_sum + (bs - raw_bs) * self.seq_len_fill_value
        padded_view = SimpleNamespace(
            **{
                **vars(forward_batch),
                "batch_size": bs,
                "seq_lens": buffers.seq_lens[:bs],
                "req_pool_indices": buffers.req_pool_indices[:bs],
                "positions": buffers.positions[:num_tokens],
                "out_cache_loc": buffers.out_cache_loc[
                    : num_tokens * self.speculative_num_steps
                ],
                "seq_lens_sum": seq_lens_sum,
            },
            num_padding=bs - raw_bs,
        )
        self.draft_attn_backend.init_forward_metadata_out_graph(padded_view)
        self.raw_bs = raw_bs
        self.bs = bs
        out = self._replay_graph(
            self._make_graph_key(bs, variant_label=self._sampling_variant(forward_batch)),
            forward_batch,
        )
        if bs != raw_bs:
            out = self._postprocess_output_to_raw_bs(out, raw_bs)
        return out
