"""Dispatch layers above the MLA decode backend: a hybrid prefill/decode
wrapper that fuses the DCP decode launch, and the fork's two-batch-overlap
child decoder."""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel

from blindsg23.common.dcp_lens import launch_trtllm_mla


class _FusedDcpHybridBase(HybridAttnBackend):
    """Hybrid wrapper whose DCP decode skips the decode backend's own
    forward_decode (one fewer dispatch per layer) and launches directly."""

    def __init__(
        self,
        model_runner: ModelRunner,
        prefill_backend,
        decode_backend: TRTLLMMLABackend,
    ):
        super().__init__(model_runner, prefill_backend, decode_backend)
        self.mla_decode: TRTLLMMLABackend = decode_backend

    def _fused_ok(self, forward_batch: ForwardBatch, q_rope, llama_4_scaling) -> bool:
        return (
            get_parallel().dcp_enabled
            and forward_batch.forward_mode.is_decode()
            and q_rope is not None
            and llama_4_scaling is None
            and self.mla_decode.data_type == torch.bfloat16
        )

    def _fused_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        dec = self.mla_decode
        if save_kv_cache:
            dec.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = torch.cat([q_nope, q_pe], dim=-1).unsqueeze(1)
        k_cache = dec.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return query, paged_row_view(k_cache, dec.page_size).unsqueeze(1)


class DcpHybridDispatch(_FusedDcpHybridBase):
    # idiom: layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_decode -> TRTLLMMLABackend._run_decode_kernel
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
        if not self._fused_ok(forward_batch, q_rope, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope=q_rope, k_rope=k_rope,
                cos_sin_cache=cos_sin_cache, is_neox=is_neox,
                llama_4_scaling=llama_4_scaling,
            )
        query, kv_cache = self._fused_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dec = self.mla_decode
        metadata = dec.forward_decode_metadata
        bs = forward_batch.batch_size
        raw_out, lse = dec._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        out = raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return out, lse.view(-1, layer.tp_q_head_num)


class DcpHybridDispatchLocal(_FusedDcpHybridBase):
    # idiom: layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_decode -> TRTLLMMLABackend._get_dcp_local_seq_lens
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
        if not self._fused_ok(forward_batch, q_rope, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope=q_rope, k_rope=k_rope,
                cos_sin_cache=cos_sin_cache, is_neox=is_neox,
                llama_4_scaling=llama_4_scaling,
            )
        query, kv_cache = self._fused_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dec = self.mla_decode
        metadata = dec.forward_decode_metadata
        bs = forward_batch.batch_size
        local_lens = dec._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = dec._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        out = raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return out, lse.view(-1, layer.tp_q_head_num)


class _ChildDecoderBase:
    """Runs the DCP MLA decode once per two-batch-overlap child.

    Each child batch carries the metadata its own child backend planned
    (``decode_trtllm_mla_metadata``); this helper only launches.
    """

    def __init__(self, backend: TRTLLMMLABackend):
        if not get_parallel().dcp_enabled:
            raise ValueError("child DCP decoder constructed without DCP")
        self.backend = backend

    def _kv(self, layer) -> torch.Tensor:
        k_cache = self.backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.backend.page_size).unsqueeze(1)


class ChildBatchDcpDecoder(_ChildDecoderBase):
    # idiom: layers/attention/tbo_backend.py TboAttnBackend (per-child dispatch) + trtllm_mla DCP decode
    # expect: SG203
    def forward_children(
        self,
        queries: List[torch.Tensor],
        layer,
        forward_batch: ForwardBatch,
    ):
        kv_cache = self._kv(layer)
        outs, lses = [], []
        for query, child in zip(queries, forward_batch.tbo_children):
            meta = child.decode_trtllm_mla_metadata
            child_bs = child.batch_size
            raw_out, lse = launch_trtllm_mla(
                self.backend,
                query,
                kv_cache,
                meta.block_kv_indices,
                child.seq_lens[:child_bs],
                meta.max_seq_len_k,
                layer,
                return_lse=True,
            )
            outs.append(raw_out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim))
            lses.append(lse.reshape(-1, layer.tp_q_head_num))
        return torch.cat(outs, dim=0), torch.cat(lses, dim=0)


class ChildBatchDcpDecoderLocal(_ChildDecoderBase):
    # idiom: layers/attention/tbo_backend.py TboAttnBackend (per-child dispatch) + layers/dcp/layout.py get_dcp_lens
    # expect: clean
    def forward_children(
        self,
        queries: List[torch.Tensor],
        layer,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        kv_cache = self._kv(layer)
        outs, lses = [], []
        for query, child in zip(queries, forward_batch.tbo_children):
            meta = child.decode_trtllm_mla_metadata
            child_bs = child.batch_size
            child_lens = get_dcp_lens(
                child.seq_lens[:child_bs], parallel.dcp_size, parallel.dcp_rank
            )
            raw_out, lse = launch_trtllm_mla(
                self.backend,
                query,
                kv_cache,
                meta.block_kv_indices,
                child_lens,
                meta.max_seq_len_k,
                layer,
                return_lse=True,
            )
            outs.append(raw_out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim))
            lses.append(lse.reshape(-1, layer.tp_q_head_num))
        return torch.cat(outs, dim=0), torch.cat(lses, dim=0)
