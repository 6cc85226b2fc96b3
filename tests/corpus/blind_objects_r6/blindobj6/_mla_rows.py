# SPDX-License-Identifier: Apache-2.0
"""Shared plumbing for the fork's FlashInfer MLA decode impls."""

import torch

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLADecodeMetadata,
    FlashInferMLAImpl,
)
from vllm.v1.kv_cache_interface import is_quantized_kv_cache


def expand_uniform(t: torch.Tensor, query_len: int) -> torch.Tensor:
    """One row per query token for a uniform batch (vLLM 0.29 idiom)."""
    return t.repeat_interleave(query_len, dim=0)


def decode_row_map(decode: FlashInferMLADecodeMetadata, num_rows: int) -> torch.Tensor:
    """Request index of every flattened decode row, from the device offsets
    (searchsorted, so ragged batches line up too)."""
    cu = decode.query_start_loc
    assert cu is not None
    rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
    return torch.searchsorted(cu[1:], rows, right=True).clamp_(
        max=decode.block_table.shape[0] - 1
    )


class FlashInferMLADecodeBase(FlashInferMLAImpl):
    """Prologue/epilogue of ``FlashInferMLAImpl.forward_mqa`` so the fork's
    impls only restate the row geometry and the launch."""

    def _prepare_q(
        self, q: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        if isinstance(q, tuple):
            q_nope, q_pe = q
            q = torch.cat([q_nope, q_pe], dim=-1)
        return q

    def _ensure_scales(self, layer: AttentionLayer) -> None:
        if self.bmm1_scale is None:
            self.bmm1_scale = self.scale
            if is_quantized_kv_cache(self.kv_cache_dtype):
                self.bmm1_scale *= layer._q_scale_float * layer._k_scale_float
        if self.bmm2_scale is None:
            self.bmm2_scale = 1.0
            if is_quantized_kv_cache(self.kv_cache_dtype):
                self.bmm2_scale *= layer._k_scale_float

    def _finish(
        self, kernel_out: torch.Tensor | tuple[torch.Tensor, torch.Tensor], return_lse: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse
