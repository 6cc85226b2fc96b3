"""cute-dsl MLA backends (native DCP kernel: enable_dcp / causal_seqlens_kv_global)."""

from __future__ import annotations

import logging

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel, get_server_args

from blindsg25.utils.mla_prep import (
    decode_metadata,
    paged_kv_cache,
    prepare_decode_query,
    split_out_lse,
)

logger = logging.getLogger(__name__)


def _spec_query(backend, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache):
    if save_kv_cache:
        backend.token_to_kv_pool.set_mla_kv_buffer(
            layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
        )
    q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
    return torch.cat([q_nope, q_pe], dim=-1).to(backend.data_type)


class ForkCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl decode + DCP speculative verify / draft extend."""

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
        # expect: clean
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        kv_cache = paged_kv_cache(self, layer)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
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
        output, lse = split_out_lse(raw_out, lse, layer)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target verify, cute-dsl)
        # expect: clean
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = _spec_query(self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num), draft_token_num,
        )
        return output.flatten(1), lse

    def _forward_draft_extend_dcp(self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache=True):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft extend, cute-dsl DCP)
        # expect: clean
        parallel = get_parallel()
        assert parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()
        query = _spec_query(self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        query = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        # init_forward_metadata kept the draft-extend lens as global_seq_lens_k
        # and derived the rank-local seq_lens_k from them.
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        return output.flatten(1), lse


class SwappedLensCuteDslMLABackend(CuteDslMLABackend):
    """Experimental cute-dsl port that schedules DCP decode on global lengths."""

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None, q_indptr_decode_buf=None):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        # Graph runs refresh the hoisted lens each step; eager runs do not.
        self._hoist_dcp_lens = not get_server_args().disable_cuda_graph

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
        # expect: SG203
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs]
        # The kernel derives this rank's cyclic share from cp_world / cp_rank.
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        return output.flatten(1), lse

    def _forward_decode_hoisted(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted lens)
        # expect: SG203
        parallel = get_parallel()
        bs = forward_batch.batch_size
        causal = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.global_seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=causal,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        fixup_zero_kv_rows(output, lse, causal, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    def _forward_decode_maybe_hoisted(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (eager fallback) -- path: DCP with --disable-cuda-graph
        # expect: SG203
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if self._hoist_dcp_lens:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_seq_lens = global_seq_lens
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
        output, lse = split_out_lse(raw_out, lse, layer)
        return output.flatten(1), lse

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target verify)
        # expect: SG203
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = _spec_query(self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache)
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        kv_lens = metadata.global_seq_lens_k
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        return output.flatten(1), lse.view(bs * draft_token_num, layer.tp_q_head_num)

    def forward_draft_extend_dcp(self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache=True):
        # idiom: layers/attention/cutedsl_mla_backend.py (0.5.18) init_forward_metadata draft_extend_v2 + decode launch
        # expect: SG203
        parallel = get_parallel()
        assert parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()
        query = _spec_query(self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache)
        bs = forward_batch.batch_size
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        query = query.view(bs, max_seq_len_q, layer.tp_q_head_num, layer.head_dim)
        # see NOTE(draft_extend seq_len handling)
        seq_lens_k = (
            forward_batch.seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        ).to(torch.int32)
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices,
            seq_lens_k,
            seq_lens_k.device,
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=block_kv_indices,
            seq_lens=seq_lens_k,
            max_seq_len=self._get_dcp_local_max_seq_len(self.max_context_len),
            layer=layer,
            causal_seqs=seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        return output.flatten(1), lse


class DelegatingCuteDslMLABackend(CuteDslMLABackend):
    """cute-dsl with the fork's fused non-DCP decode; DCP goes upstream."""

    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP delegated upstream)
        # expect: clean
        if get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = prepare_decode_query(
            self, q, k, q_rope, k_rope, layer, forward_batch, save_kv_cache
        )
        metadata = decode_metadata(self, forward_batch)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=paged_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def _forward_decode_hoisted(self, query, kv_cache, metadata, layer, forward_batch):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted lens)
        # expect: clean
        parallel = get_parallel()
        bs = forward_batch.batch_size
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse
