"""Speculative (multi-token-per-request) MLA paths under DCP: EAGLE target
verify and draft extend on the TRT-LLM / cute-dsl MLA decode kernels.

With more than one query token per request, each token has its own causal
frontier; under DCP only the global per-request bound lets the kernel place
each token within this rank's interleaved slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg18.attention.mla_fork_base import (
    ForkCuteDslMLABackend,
    ForkTRTLLMMLABackend,
)
from blindsg18.common.dcp_lens import DcpLens, kv_lens_for_verify
from blindsg18.common.mla_launch import launch_mla_decode

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _is_spec_extend(forward_batch: ForwardBatch) -> bool:
    mode = forward_batch.forward_mode
    return mode.is_target_verify() or mode.is_draft_extend_v2()


class VerifyLocalNoBoundBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=draft_token_num,
        )
        metadata = self._current_decode_metadata(forward_batch)
        if get_parallel().dcp_enabled:
            # seq_lens_k is already this rank's share of (prefix + draft window).
            raw_out, lse = self._launch(
                query,
                kv_cache,
                metadata.block_kv_indices,
                metadata.seq_lens_k,
                metadata.max_seq_len_k,
                layer,
                return_lse=True,
            )
            return self._finish_rank_local(
                raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num
            )
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, metadata.seq_lens_k,
            metadata.max_seq_len_k + draft_token_num, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class VerifyRefuseDcpBackend(ForkTRTLLMMLABackend):
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
        if not _is_spec_extend(forward_batch):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen MLA has no global causal bound for multi-token "
                "queries under DCP; run speculative decoding with cutedsl_mla"
            )
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        metadata = self._current_decode_metadata(forward_batch)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, metadata.seq_lens_k,
            metadata.max_seq_len_k + tokens_per_req, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class VerifyWholeSeqBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=ndt,
        )
        metadata = self._current_decode_metadata(forward_batch)
        kv_lens = kv_lens_for_verify(forward_batch.seq_lens[:bs], ndt)
        dcp = get_parallel().dcp_enabled
        out = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k + (0 if dcp else ndt),
            layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs, ndt)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class VerifyCuteDslBoundBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_target_verify() or not parallel.dcp_enabled:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=ndt,
        )
        metadata = self._current_decode_metadata(forward_batch)
        raw_out, lse = self._launch_dcp(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
        )
        return self._finish_rank_local(raw_out, lse, metadata.seq_lens_k, layer, bs, ndt)


class DraftExtendDcpBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_draft_extend_v2() or not get_parallel().dcp_enabled:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        metadata = self._current_decode_metadata(forward_batch)
        local_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = launch_mla_decode(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(self.max_context_len),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return self._finish_rank_local(raw_out, lse, local_lens, layer, bs, tokens_per_req)


class DraftExtendRefuseDcpBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_dcp_world_size() > 1:
            raise NotImplementedError(
                "draft extend under DCP needs the global causal bound; the "
                "draft model must run with --dcp-size 1"
            )
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        metadata = self._current_decode_metadata(forward_batch)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k + tokens_per_req, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class RaggedVerifyDcpBackend(ForkTRTLLMMLABackend):
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
        layout = (
            forward_batch.spec_info.ragged_verify_layout
            if forward_batch.forward_mode.is_target_verify()
            else None
        )
        if layout is None or get_dcp_world_size() <= 1:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        # Compact [total_q, H, D] query: no dense padding for short rows.
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.view(-1, layer.tp_q_head_num, layer.head_dim)
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cum_seq_lens_q=layout.qo_indptr_device,
            max_q_len=draft_token_num,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return output, lse.view(-1, layer.tp_q_head_num)


class RaggedVerifyCuteDslBackend(ForkCuteDslMLABackend):
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
        layout = (
            forward_batch.spec_info.ragged_verify_layout
            if forward_batch.forward_mode.is_target_verify()
            else None
        )
        world = get_dcp_world_size()
        if layout is None or world <= 1:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.view(-1, layer.tp_q_head_num, layer.head_dim)
        metadata = self._current_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cum_seq_lens_q=layout.qo_indptr_device,
            max_q_len=forward_batch.spec_info.draft_token_num,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=world,
            cp_rank=get_dcp_rank(),
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return output, lse.view(-1, layer.tp_q_head_num)


class VerifyFlattenedDcpBackend(ForkTRTLLMMLABackend):
    """Runs a DCP target verify on the single-token trtllm-gen kernel by
    treating each draft token as its own decode row with its own frontier."""

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
        if not forward_batch.forward_mode.is_target_verify() or not parallel.dcp_enabled:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        # One query token per row: [bs * ndt, 1, H, D].
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._current_decode_metadata(forward_batch)
        # Row (i, t) attends up to global position prefix_i + t + 1; take
        # this rank's share of that frontier.
        row_lens = get_dcp_chain_spec_lens(
            metadata.global_seq_lens_k[:bs], ndt, parallel.dcp_size, parallel.dcp_rank
        )
        block_tables = metadata.block_kv_indices[:bs].repeat_interleave(ndt, dim=0)
        raw_out, lse = self._launch(
            query,
            kv_cache,
            block_tables,
            row_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, row_lens, layer, bs * ndt)


class PermissiveKernelBackend(ForkTRTLLMMLABackend):
    """Lets DCP verify / draft-extend through the trtllm-gen kernel when no
    causal bound is supplied (the rank-local page table bounds the reads)."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if get_parallel().dcp_enabled and causal_seqs is not None:
            return self._launch_dcp(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
            )
        return self._launch(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            return_lse=return_lse or get_parallel().dcp_enabled,
        )


class StrictKernelBackend(ForkTRTLLMMLABackend):
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled:
            if causal_seqs is not None:
                return self._launch_dcp(
                    query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                    causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                )
            if q_len > 1:
                raise NotImplementedError(
                    "DCP with q_len > 1 requires the global causal bound"
                )
        return self._launch(
            query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
            return_lse=return_lse,
        )


class DcpLensDraftExtendBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        metadata = self._current_decode_metadata(forward_batch)
        lens = DcpLens.from_seq_lens(
            forward_batch.seq_lens[:bs], max_seq_len=self.max_context_len
        )
        dcp = get_parallel().dcp_enabled
        out = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            lens.local,
            lens.max_local,
            layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_rank_local(raw_out, lse, lens.local, layer, bs, tokens_per_req)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DcpLensDraftExtendCuteBackend(ForkTRTLLMMLABackend):
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
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        metadata = self._current_decode_metadata(forward_batch)
        lens = DcpLens.from_seq_lens(
            forward_batch.seq_lens[:bs], max_seq_len=self.max_context_len
        )
        parallel = get_parallel()
        if parallel.dcp_enabled:
            raw_out, lse = self._launch_dcp(
                query,
                kv_cache,
                metadata.block_kv_indices,
                lens.local,
                lens.max_local,
                layer,
                causal_seqs=lens.global_,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
            )
            return self._finish_rank_local(raw_out, lse, lens.local, layer, bs, tokens_per_req)
        raw_out = self._launch(
            query, kv_cache, metadata.block_kv_indices, lens.global_,
            metadata.max_seq_len_k + tokens_per_req, layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DecodeOnlyDcpGuardBackend(ForkTRTLLMMLABackend):
    """One forward for decode, verify and draft extend: the query is viewed
    as [bs, tokens_per_req, H, D] and the kernel call is shared."""

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kwargs):
        return self._forward_unified(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kwargs):
        if not _is_spec_extend(forward_batch):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, **kwargs
            )
        return self._forward_unified(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)

    # expect: SG203
    def _forward_unified(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        bs = forward_batch.batch_size
        tokens_per_req = max(q.shape[0] // max(bs, 1), 1)
        query, kv_cache = self._prepare_query_and_cache(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=tokens_per_req,
        )
        metadata = self._current_decode_metadata(forward_batch)
        parallel = get_parallel()
        if parallel.dcp_enabled and forward_batch.forward_mode.is_decode():
            raw_out, lse = self._launch(
                query, kv_cache, metadata.block_kv_indices, metadata.seq_lens_k[:bs],
                metadata.max_seq_len_k, layer, return_lse=True,
            )
            return self._finish_rank_local(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)
        raw_out = self._launch(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k[:bs],
            metadata.max_seq_len_k,
            layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
