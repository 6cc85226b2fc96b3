# SPDX-License-Identifier: Apache-2.0
"""Shared decode launcher for the fork's FlashInfer MLA impls."""

from __future__ import annotations

from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
)
from vllm.v1.kv_cache_interface import is_quantized_kv_cache


class RowDecodeFlashInferMLAImpl(FlashInferMLAImpl):
    """Splits forward_mqa into row preparation (subclasses) and the launch."""

    def _dcp_launch_kwargs(self, causal_seqlens_kv_global: torch.Tensor) -> dict[str, Any]:
        return dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=causal_seqlens_kv_global,
            backend="cute-dsl",
        )

    def _run_trtllm_decode(
        self,
        q: torch.Tensor,
        kv_c_and_k_pe_cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
        extra_kwargs: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.bmm1_scale is None:
            self.bmm1_scale = self.scale
            if is_quantized_kv_cache(self.kv_cache_dtype):
                self.bmm1_scale *= layer._q_scale_float * layer._k_scale_float
        if self.bmm2_scale is None:
            self.bmm2_scale = 1.0
            if is_quantized_kv_cache(self.kv_cache_dtype):
                self.bmm2_scale *= layer._k_scale_float

        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        if return_lse:
            o, lse = kernel_out
            lse = lse.view(-1, lse.shape[-1])
        else:
            o, lse = kernel_out, None
        o = o.view(-1, o.shape[-2], o.shape[-1])
        return o, lse
