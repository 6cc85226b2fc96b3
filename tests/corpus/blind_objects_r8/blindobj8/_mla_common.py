# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the fork's FlashInfer MLA decode paths."""

from typing import Any

import torch

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAMetadata,
    _get_multi_ctas_kv_counter_buffer,
    _select_mla_decode_backend,
)
from vllm.v1.kv_cache_interface import is_quantized_kv_cache


class FlashInferDecodeMixin:
    """Prologue/epilogue shared by FlashInferMLAImpl.forward_mqa variants."""

    def _query_tensor(
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

    def _launch_kwargs(
        self, q: torch.Tensor, kv_c_and_k_pe_cache: torch.Tensor
    ) -> dict[str, Any]:
        """Backend selection kwargs (no DCP geometry)."""
        runtime_num_heads = q.shape[-2]
        if self.dcp_world_size > 1:
            return {"backend": "cute-dsl"}
        backend = _select_mla_decode_backend(runtime_num_heads)
        if backend:
            return {"backend": backend}
        if kv_c_and_k_pe_cache.shape[-2] in (32, 64) and self._mla_counter_bytes:
            return {
                "multi_ctas_kv_counter_buffer": _get_multi_ctas_kv_counter_buffer(
                    self._mla_counter_bytes, q.device
                )
            }
        return {}

    def _native_dcp_kwargs(self, attn_metadata: FlashInferMLAMetadata) -> dict[str, Any]:
        """Native context-parallel kwargs with one global bound per request."""
        if self.dcp_world_size <= 1:
            return {}
        assert attn_metadata.decode is not None
        causal_seqlens_kv_global = attn_metadata.decode.dcp_tot_seq_lens
        assert causal_seqlens_kv_global is not None
        return dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
        )

    def _finish(
        self, kernel_out: Any, return_lse: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        return o.view(-1, o.shape[-2], o.shape[-1]), lse
