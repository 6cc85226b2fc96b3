"""Hybrid attention backends whose decode side is an MLA backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple, Union

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.hybrid_attn_backend import HybridAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg22.attn.mla_common import (
    build_mla_query,
    finish_dcp_decode,
    mla_kv_cache,
    save_mla_kv,
)

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

DecodeOut = Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]


class ForkHybridTrtllmDecodeBackend(HybridAttnBackend):
    """prefill: any backend; decode: trtllm_mla (DCP capable for q_len == 1)."""

    decode_backend: TRTLLMMLABackend

    # idiom: sglang/srt/layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_decode delegating into TRTLLMMLABackend._run_decode_kernel
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        **kwargs,
    ) -> DecodeOut:
        backend = self.decode_backend
        if not get_parallel().dcp_enabled:
            return backend.forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, **kwargs
            )
        if save_kv_cache:
            save_mla_kv(backend, layer, forward_batch, k, k_rope)
        metadata = backend.forward_decode_metadata
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = backend._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(backend, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, backend.q_indptr_decode[: bs + 1], layer
        )


class ForkHybridTrtllmDelegatingBackend(HybridAttnBackend):
    """Same hybrid, but DCP decode stays inside the trtllm_mla backend."""

    decode_backend: TRTLLMMLABackend

    # idiom: sglang/srt/layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_decode (plain delegation: TRTLLMMLABackend.forward_decode -> _forward_decode_dcp uses rank-local seq_lens_k)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        **kwargs,
    ) -> DecodeOut:
        backend = self.decode_backend
        # Under DCP the trtllm_mla decode returns (out, lse) for the model's
        # cross-rank merge; pass it through unchanged.
        return backend.forward_decode(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, **kwargs
        )


class ForkHybridCuteDslVerifyBackend(HybridAttnBackend):
    """speculative_attention_mode=decode: verify runs on the cutedsl_mla side."""

    decode_backend: CuteDslMLABackend

    # idiom: sglang/srt/layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_extend (target_verify routed to decode_backend) into CuteDslMLABackend._run_decode_kernel
    # expect: SG203
    def forward_verify_on_decode_backend(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        backend = self.decode_backend
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        global_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = backend._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, draft_token_num),
            kv_cache=mla_kv_cache(backend, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            global_lens,
            backend._dense_q_indptr(bs, draft_token_num),
            layer,
            draft_token_num,
        )

    # idiom: sglang/srt/layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_extend (target_verify on decode_backend), lens as in TRTLLMMLABackend.forward_extend DCP branch
    # expect: clean
    def forward_verify_on_decode_backend_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        backend = self.decode_backend
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = backend._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, draft_token_num),
            kv_cache=mla_kv_cache(backend, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            local_lens,
            backend._dense_q_indptr(bs, draft_token_num),
            layer,
            draft_token_num,
        )
