"""Fork overrides of the trtllm / cute-dsl MLA decode under DCP."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from ._mla_common import build_decode_query, finish_rank_local, paged_kv_cache

if is_flashinfer_available():
    import flashinfer


class DcpDecodeFromBatch(TRTLLMMLABackend):
    """DCP decode that re-derives lengths from the batch (the hoisted
    metadata can be stale after a DP-padded replan)."""

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )


class DcpDecodeFromBatchLocal(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )


class DirectKernelDcpBackend(TRTLLMMLABackend):
    """Calls the flashinfer kernel directly on the DCP path (skips the hook)."""

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if get_dcp_world_size() <= 1:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = build_decode_query(
            self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
        ).unsqueeze(1)
        kv_cache = paged_kv_cache(self, layer)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, metadata.seq_lens_k, self.q_indptr_decode[: bs + 1], 1, layer
        )


class DirectKernelDcpBackendLocal(TRTLLMMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if get_dcp_world_size() <= 1:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = build_decode_query(
            self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
        ).unsqueeze(1)
        kv_cache = paged_kv_cache(self, layer)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        local_lens = get_dcp_lens(
            forward_batch.seq_lens, get_dcp_world_size(), get_dcp_rank()
        ).to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, local_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )


class SplitPathDecodeBackend(TRTLLMMLABackend):
    """One kernel call for both the DCP and the plain decode."""

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        dcp_size, dcp_rank = get_dcp_world_size(), get_dcp_rank()
        lens_of = (
            (lambda fb: fb.seq_lens)
            if dcp_size == 1
            else (lambda fb: get_dcp_lens(fb.seq_lens, dcp_size, dcp_rank))
        )
        query = build_decode_query(
            self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
        ).unsqueeze(1)
        metadata = forward_batch.decode_trtllm_mla_metadata
        seq_lens = lens_of(forward_batch).to(torch.int32)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp_size > 1,
        )
        if dcp_size == 1:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        bs = forward_batch.batch_size
        return finish_rank_local(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1, layer
        )


class SwappedLensCuteDslBackend(CuteDslMLABackend):
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = build_decode_query(
            self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
        ).unsqueeze(1)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.global_seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.seq_lens_k[:bs],
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, metadata.seq_lens_k[:bs], self.q_indptr_decode[: bs + 1], 1, layer
        )


class HoistedLensCuteDslBackend(CuteDslMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = build_decode_query(
            self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
        ).unsqueeze(1)
        # init_forward_metadata stored the rank-local view in seq_lens_k and
        # kept the whole-sequence lengths in global_seq_lens_k.
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
            return_lse=True,
        )
        return finish_rank_local(
            raw_out, lse, metadata.seq_lens_k[:bs], self.q_indptr_decode[: bs + 1], 1, layer
        )
