"""Speculative (draft-extend / target-verify / draft-chain) MLA decode under DCP."""

from __future__ import annotations

from typing import List, Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from ._mla_common import build_decode_query, finish_rank_local, paged_kv_cache
from .lens import chain_local_kv_lens

if is_flashinfer_available():
    import flashinfer


class _DcpSpecBase(TRTLLMMLABackend):
    """Routes DCP draft-extend / target-verify to the fork's kernels."""

    def forward_extend(
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
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_draft_extend_v2() or mode.is_target_verify()
        ):
            query = build_decode_query(
                self, q, q_rope, k, k_rope, layer, forward_batch, save_kv_cache
            )
            kv_cache = paged_kv_cache(self, layer)
            if mode.is_target_verify():
                return self._target_verify_dcp(query, kv_cache, layer, forward_batch)
            return self._draft_extend_dcp(query, kv_cache, layer, forward_batch)
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )

    def _draft_extend_dcp(self, query, kv_cache, layer, forward_batch):
        raise NotImplementedError

    def _target_verify_dcp(self, query, kv_cache, layer, forward_batch):
        raise NotImplementedError


class DcpSpecDecodeBackend(_DcpSpecBase):
    # expect: SG203
    def _draft_extend_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        q = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return finish_rank_local(
            raw_out,
            lse,
            local_lens,
            self._dense_q_indptr(bs, tokens_per_seq),
            tokens_per_seq,
            layer,
        )

    # expect: SG203
    def _target_verify_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
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
            return_lse=True,
        )
        return finish_rank_local(
            raw_out,
            lse,
            metadata.seq_lens_k[:bs],
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
            layer,
        )


class DcpSpecCausalBackend(_DcpSpecBase):
    # expect: clean
    def _draft_extend_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        q = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
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
            raw_out,
            lse,
            local_lens,
            self._dense_q_indptr(bs, tokens_per_seq),
            tokens_per_seq,
            layer,
        )

    # expect: clean
    def _target_verify_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        total_kv_lens = forward_batch.seq_lens[:bs] + ndt
        # One query row per verify token: every row carries its own causal
        # frontier, so the kernel sees q_len == 1 and rank-local lengths.
        row_lens = chain_local_kv_lens(total_kv_lens, ndt)
        q = query.view(bs * ndt, 1, layer.tp_q_head_num, layer.head_dim)
        block_tables = metadata.block_kv_indices.repeat_interleave(ndt, dim=0)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        row_indptr = torch.arange(
            bs * ndt + 1, dtype=torch.int32, device=row_lens.device
        )
        return finish_rank_local(raw_out, lse, row_lens, row_indptr, 1, layer)


class DcpSpecRefusingBackend(_DcpSpecBase):
    # expect: clean
    def _draft_extend_dcp(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        if tokens_per_seq > 1:
            raise NotImplementedError(
                "trtllm-gen MLA decode has no global causal bound; a DCP draft "
                "extend with more than one token per request needs cutedsl_mla"
            )
        q = query.view(bs, 1, layer.tp_q_head_num, layer.head_dim)
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
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


class DcpChainDraftDecode(TRTLLMMLABackend):
    """Eager draft chain: step ``i`` attends the prefix plus ``i + 1`` drafts."""

    # expect: SG203
    def decode_draft_chain(
        self,
        step_queries: List[torch.Tensor],
        kv_cache: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
    ):
        assert get_parallel().dcp_enabled
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        outputs = []
        for step, query in enumerate(step_queries):
            step_lens = (forward_batch.seq_lens[:bs] + step + 1).to(torch.int32)
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
                kv_cache=kv_cache,
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=metadata.block_kv_indices,
                seq_lens=step_lens,
                max_seq_len=metadata.max_seq_len_k + step + 1,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                return_lse=True,
            )
            outputs.append(
                finish_rank_local(
                    raw_out, lse, step_lens, self.q_indptr_decode[: bs + 1], 1, layer
                )
            )
        return outputs


class DcpChainDraftDecodeLocal(TRTLLMMLABackend):
    # expect: clean
    def decode_draft_chain(
        self,
        step_queries: List[torch.Tensor],
        kv_cache: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        assert parallel.dcp_enabled
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        outputs = []
        for step, query in enumerate(step_queries):
            step_lens = get_dcp_lens(
                forward_batch.seq_lens[:bs] + step + 1,
                parallel.dcp_size,
                parallel.dcp_rank,
            ).to(torch.int32)
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
                kv_cache=kv_cache,
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=metadata.block_kv_indices,
                seq_lens=step_lens,
                max_seq_len=metadata.max_seq_len_k + step + 1,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                return_lse=True,
            )
            outputs.append(
                finish_rank_local(
                    raw_out, lse, step_lens, self.q_indptr_decode[: bs + 1], 1, layer
                )
            )
        return outputs
