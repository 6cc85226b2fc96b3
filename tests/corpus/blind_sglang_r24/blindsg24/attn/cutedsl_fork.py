"""cute-dsl MLA decode with DCP: the fork's variants of CuteDslMLABackend.

Under DCP each rank holds an interleaved slice of every request's KV; the
cute-dsl kernel takes this rank's lengths as ``seq_lens`` and the whole
sequence's lengths as ``causal_seqlens_kv_global`` (SGLang's helper passes
``causal_seqs`` through to it).
"""

from typing import Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg24.attn.mla_common import MlaDecodeQueryMixin
from blindsg24.common.dcp_lens import decode_kv_lens, rank_local_lens


class ForkCuteDslMLABackend(MlaDecodeQueryMixin, CuteDslMLABackend):
    """First port of the DCP decode: lengths straight from the batch."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
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
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_cache = self._paged_kv_cache(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)


class ForkCuteDslMLABackendLocal(MlaDecodeQueryMixin, CuteDslMLABackend):
    """The same port after review: rank-local lengths, global causal bound."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (_get_dcp_local_seq_lens)
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
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_cache = self._paged_kv_cache(layer)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)


class HoistedLensCuteDslMLABackend(MlaDecodeQueryMixin, CuteDslMLABackend):
    """DCP decode entry points that read the per-step hoisted lengths
    (``seq_lens_k`` rank-local, ``global_seq_lens_k`` whole sequence, as
    TRTLLMMLABackend.init_forward_metadata leaves them under DCP)."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted path)
    # expect: SG203
    def dcp_decode_hoisted(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted path: seq_lens_k local, global_seq_lens_k causal)
    # expect: clean
    def dcp_decode_hoisted_local(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted-or-recompute branch)
    # expect: SG203
    def dcp_decode_with_fallback(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("dcp_decode_with_fallback is the DCP-only entry")
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            # Draft runners built with skip_prefill never hoist; use the batch.
            local_seq_lens = global_seq_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (else-branch recomputes via _get_dcp_local_seq_lens)
    # expect: clean
    def dcp_decode_with_local_fallback(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("dcp_decode_with_local_fallback is the DCP-only entry")
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.get_cuda_graph_seq_len_fill_value (padded rows filled with 1) + cute-dsl DCP launch
    # expect: SG203
    def dcp_decode_clamped(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # Padded DP rows carry seq_len 0; keep the scheduler bound positive.
        global_seq_lens = torch.clamp(forward_batch.seq_lens[:bs], min=1)
        kv_lens = global_seq_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (seq_lens vs causal_seqs argument order)
    # expect: SG203
    def dcp_decode_recomputed(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query,
            self._paged_kv_cache(layer),
            metadata.block_kv_indices,
            global_seq_lens,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=local_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (positional seq_lens, keyword causal_seqs)
    # expect: clean
    def dcp_decode_recomputed_ordered(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query,
            self._paged_kv_cache(layer),
            metadata.block_kv_indices,
            local_seq_lens,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; lengths from blindsg24.common.dcp_lens.decode_kv_lens
    # expect: SG203
    def dcp_decode_shared_lens(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = decode_kv_lens(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; lengths via blindsg24.common.dcp_lens.rank_local_lens (get_dcp_lens)
    # expect: clean
    def dcp_decode_shared_local_lens(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = decode_kv_lens(forward_batch)
        local_lens = rank_local_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_lens, layer, bs)
