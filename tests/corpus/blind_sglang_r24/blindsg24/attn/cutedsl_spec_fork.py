"""Speculative (multi-token query) paths on cute-dsl MLA with DCP: target
verify and draft extend. A query with several tokens per request needs the
global causal bound so each token is placed inside this rank's slice."""

from typing import Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg24.attn.mla_common import MlaDecodeQueryMixin
from blindsg24.common.dcp_lens import (
    draft_extend_kv_lens,
    rank_local_lens,
    verify_kv_lens,
)

if is_flashinfer_available():
    import flashinfer


class _SpecQueryMixin(MlaDecodeQueryMixin):
    def _spec_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
        q_len: int,
    ) -> torch.Tensor:
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        return query.reshape(bs, q_len, layer.tp_q_head_num, layer.head_dim).to(
            self.data_type
        )


class ForkCuteDslVerifyBackend(_SpecQueryMixin, CuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify DCP branch, causal_seqs=global_seq_lens_k)
    # expect: SG203
    def forward_extend(
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
        if not (
            forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._spec_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, draft_token_num
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
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
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs, draft_token_num)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py forward_extend (target verify); lengths from blindsg24.common.dcp_lens
    # expect: SG203
    def dcp_verify_shared_lens(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        draft_token_num = forward_batch.spec_info.draft_token_num
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = verify_kv_lens(forward_batch.seq_lens[:bs], draft_token_num)
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim),
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
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs, draft_token_num)


class ForkCuteDslVerifyBackendLocal(_SpecQueryMixin, CuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (target verify: global = seq_lens + ndt, local via _get_dcp_local_seq_lens)
    # expect: clean
    def forward_extend(
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
        if not (
            forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._spec_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, draft_token_num
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_kv_lens = self._get_dcp_local_seq_lens(global_kv_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, local_kv_lens, layer, bs, draft_token_num
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py forward_extend (target verify); blindsg24.common.dcp_lens.rank_local_lens (get_dcp_lens)
    # expect: clean
    def dcp_verify_shared_local_lens(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        draft_token_num = forward_batch.spec_info.draft_token_num
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_kv_lens = verify_kv_lens(forward_batch.seq_lens[:bs], draft_token_num)
        local_kv_lens = rank_local_lens(global_kv_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim),
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, local_kv_lens, layer, bs, draft_token_num
        )


class ForkCuteDslDraftExtendBackend(_SpecQueryMixin, CuteDslMLABackend):
    """Draft extend on cute-dsl. SGLang's own draft-extend DCP path goes
    through TRTLLMMLABackend._run_decode_kernel, which refuses it; the fork
    calls the kernel directly instead."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend direct-view branch) + flashinfer trtllm_batch_decode_with_kv_cache_mla
    # expect: SG203
    def dcp_draft_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = self.num_draft_tokens
        query = self._spec_query(
            q, k, layer, forward_batch, True, q_rope, k_rope, tokens_per_req
        )
        if parallel.dcp_enabled:
            seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
        else:
            seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs, tokens_per_req)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP q_len > 1 refused with NotImplementedError)
    # expect: clean
    def dcp_draft_extend_refused(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if parallel.dcp_enabled:
            raise NotImplementedError(
                "draft extend under DCP needs the global causal bound; "
                "this fork does not wire causal_seqlens_kv_global for it yet"
            )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = self.num_draft_tokens
        query = self._spec_query(
            q, k, layer, forward_batch, True, q_rope, k_rope, tokens_per_req
        )
        seq_lens = metadata.seq_lens_k[:bs]
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py init_forward_metadata (NOTE(draft_extend seq_len handling)) + CuteDslMLABackend._run_decode_kernel
    # expect: SG203
    def dcp_draft_extend_bounded(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        kv_lens = draft_extend_kv_lens(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, max_q, layer.tp_q_head_num, layer.head_dim),
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k + max_q,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs, max_q)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata (draft_extend: global copy + _get_dcp_local_seq_lens)
    # expect: clean
    def dcp_draft_extend_bounded_local(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        max_q = max(forward_batch.extend_seq_lens_cpu)
        global_kv_lens = draft_extend_kv_lens(forward_batch)
        local_kv_lens = self._get_dcp_local_seq_lens(global_kv_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query.view(bs, max_q, layer.tp_q_head_num, layer.head_dim),
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=metadata.max_seq_len_k + max_q,
            layer=layer,
            causal_seqs=global_kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_kv_lens, layer, bs, max_q)
