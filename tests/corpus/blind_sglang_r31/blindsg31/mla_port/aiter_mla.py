"""ROCm port of the trtllm_mla backend family.

``AiterPortMLABackend`` keeps TRTLLMMLABackend's metadata planning (block
tables, DCP page tables, CUDA-graph buffers) and swaps the decode kernel for
aiter's asm MLA decode. The gfx942 variant trades a few checks for latency.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.runtime_context import get_parallel

from blindsg31.mla_port import kernel_shim
from blindsg31.mla_port.lengths import local_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


class AiterPortMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner: "ModelRunner", skip_prefill: bool = False, **kw):
        super().__init__(model_runner, skip_prefill, backend="trtllm-gen", **kw)
        self.kv_last_page_len = torch.ones(
            model_runner.max_running_requests, dtype=torch.int32, device=self.device
        )

    def _aiter_call(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        layer: "RadixAttention",
        *,
        g_kv_indptr: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        bs, q_len = query.shape[0], query.shape[1]
        flat_q = query.reshape(bs * q_len, layer.tp_q_head_num, -1)
        out = flat_q.new_empty((bs * q_len, layer.tp_q_head_num, self.kv_lora_rank))
        qo_indptr = torch.arange(
            0, (bs + 1) * q_len, q_len, dtype=torch.int32, device=query.device
        )
        result = kernel_shim.aiter_mla_decode(
            flat_q,
            kv_cache.view(-1, 1, 1, flat_q.shape[-1]),
            out,
            qo_indptr,
            kernel_shim.csr_from_lens(seq_lens),
            block_tables.flatten(),
            self.kv_last_page_len[:bs],
            q_len,
            sm_scale=layer.scaling,
            return_lse=return_lse,
            g_kv_indptr=g_kv_indptr,
            cp_world_size=cp_world,
            cp_rank=cp_rank,
            causal=q_len > 1,
        )
        if return_lse:
            _, lse = result
            return out.view(bs, q_len, layer.tp_q_head_num, -1), lse
        return out.view(bs, q_len, layer.tp_q_head_num, -1)

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; aiter override forwards the rank-local seq_lens, turns causal_seqs into the global indptr bound, refuses a DCP multi-token query without it
    # expect: clean
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        parallel = get_parallel()
        if parallel.dcp_enabled:
            # The draft-extend caller passes no DCP arguments at all; refuse
            # any multi-token query that arrives without the global bound.
            if q_len > 1 and causal_seqs is None:
                raise NotImplementedError(
                    "aiter MLA: a DCP query with q_len > 1 needs the global "
                    "causal bound (causal_seqs)"
                )
            cp_world, cp_rank = parallel.dcp_size, parallel.dcp_rank
        g_kv_indptr = (
            kernel_shim.csr_from_lens(causal_seqs) if causal_seqs is not None else None
        )
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return self._aiter_call(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            layer,
            g_kv_indptr=g_kv_indptr,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata; override re-derives seq_lens_k as int32 forward_batch.seq_lens after super() localized it
    # expect: SG203
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle():
            md: TRTLLMMLADecodeMetadata = self.forward_decode_metadata
            # aiter reads int32 lengths; avoid the per-layer cast.
            md.seq_lens_k = forward_batch.seq_lens.to(torch.int32)
            forward_batch.decode_trtllm_mla_metadata = md

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; override falls back to forward_batch.seq_lens when the hoisted seq_lens_k is absent
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            rank_seq_lens = metadata.seq_lens_k[:bs]
        else:
            rank_seq_lens = forward_batch.seq_lens[:bs]
        out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
            -1, layer.tp_q_head_num
        )


class AiterGfx942MLABackend(AiterPortMLABackend):
    """gfx942: skips the causal-bound plumbing on the verify path."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel; subclass override drops causal_seqs and launches a multi-token DCP query with rank-local lengths only
    # expect: SG203
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if query.dim() == 3:
            query = query.unsqueeze(1)
        # gfx942 asm kernel: per-rank causal masking is implied by seq_lens.
        return self._aiter_call(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            layer,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata; override re-derives seq_lens_k through the DCP-localizing helper
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        TRTLLMMLABackend.init_forward_metadata(self, forward_batch)
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle():
            md: TRTLLMMLADecodeMetadata = self.forward_decode_metadata
            md.global_seq_lens_k = forward_batch.seq_lens.to(torch.int32)
            md.seq_lens_k = self._get_dcp_local_seq_lens(md.global_seq_lens_k)
            forward_batch.decode_trtllm_mla_metadata = md

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; override localizes the fallback lengths with get_dcp_lens
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            rank_seq_lens = metadata.seq_lens_k[:bs]
        else:
            rank_seq_lens = local_lens(forward_batch.seq_lens[:bs])
        out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim), lse.view(
            -1, layer.tp_q_head_num
        )
