"""Thin subclasses of SGLang's trtllm_mla / cutedsl_mla backends that reuse
the upstream DCP metadata (``seq_lens_k`` rank-local, ``global_seq_lens_k``
whole-sequence) and swap the decode forward."""

from __future__ import annotations

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel


class _PrepMixin:
    def _prep_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        if save_kv_cache and k is not None:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            query = concat_mla_absorb_q_general(
                q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
                q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
            )
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        return query.unsqueeze(1)

    def _prep_kv(self, layer):
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _upstream_metadata(self, forward_batch):
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        if getattr(metadata, "batch_size", forward_batch.batch_size) < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _finish(self, raw_out, lse, layer, local_lens, bs):
        out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(out, lse, local_lens, self.q_indptr_decode[: bs + 1], 1)
        return out.flatten(1), lse


class ForkCuteDslGlobalBackend(_PrepMixin, CuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode, twist: the port hands global_seq_lens_k to _run_decode_kernel as seq_lens, assuming cute-dsl slices it per rank
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._upstream_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._prep_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, layer, metadata.seq_lens_k[:bs], bs)


class ForkCuteDslLocalBackend(_PrepMixin, CuteDslMLABackend):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode, twist: port re-reads upstream metadata through a mixin and passes seq_lens_k plus global_seq_lens_k as the causal bound
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._upstream_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._prep_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish(raw_out, lse, layer, local_lens, bs)


class ForkCuteDslRefusingBackend(CuteDslMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (refusal), twist: override on the cute-dsl subclass refuses a multi-token DCP launch that arrives without causal_seqs
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs=None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and q_len > 1 and causal_seqs is None:
            raise NotImplementedError(
                "multi-token MLA decode under DCP requires causal_seqs"
            )
        return super()._run_decode_kernel(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            causal_seqs=causal_seqs,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )


class ForkTrtllmGlobalBackend(_PrepMixin, TRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: single-token DCP decode through the upstream _run_decode_kernel (not refused for q_len == 1 with return_lse) but fed global_seq_lens_k
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._upstream_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query,
            self._prep_kv(layer),
            metadata.block_kv_indices,
            metadata.global_seq_lens_k[:bs],
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, layer, metadata.seq_lens_k[:bs], bs)


class ForkTrtllmLocalBackend(_PrepMixin, TRTLLMMLABackend):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: single-token DCP decode on trtllm-gen with rank-local seq_lens_k and no causal bound (q_len == 1 needs none)
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._upstream_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query,
            self._prep_kv(layer),
            metadata.block_kv_indices,
            local_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish(raw_out, lse, layer, local_lens, bs)
