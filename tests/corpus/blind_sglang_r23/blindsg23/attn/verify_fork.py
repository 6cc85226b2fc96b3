"""Multi-token (target verify / draft extend) MLA launches under DCP.

With more than one query token per request, each token has its own causal
limit; the trtllm-gen kernel only takes per-request lengths, so the fork either
hands the cute-dsl kernel the global bound, flattens a chain verify into
single-token rows with per-token frontiers, or refuses.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg23.attn.mla_fork_base import ForkTRTLLMMLABase
from blindsg23.common.dcp_lens import launch_trtllm_mla

if is_flashinfer_available():
    import flashinfer


class ForkVerifyBase(ForkTRTLLMMLABase):
    """Routes DCP target verify to ``_verify_dcp_rows``; everything else upstream."""

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
        if (
            not forward_batch.forward_mode.is_target_verify()
            or not get_parallel().dcp_enabled
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        return self._verify_dcp_rows(
            query,
            self._kv_cache_view(layer),
            self._decode_metadata(forward_batch),
            layer,
            forward_batch,
            draft_token_num,
        )

    def _verify_dcp_rows(self, query, kv_cache, metadata, layer, forward_batch, draft_token_num):
        raise NotImplementedError


class SharedFrontierVerifyBackend(ForkVerifyBase):
    # idiom: hardware_backend/npu/attention/ascend_backend.py _get_kv_lens_and_block_tables (flattened spec rows) on trtllm-gen
    # expect: SG203
    def _verify_dcp_rows(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
        draft_token_num: int,
    ):
        if forward_batch.spec_info.topk != 1:
            raise NotImplementedError("flattened DCP verify handles chain drafts only")
        bs = forward_batch.batch_size
        # Flatten [bs, ndt] into bs * ndt single-token rows: trtllm-gen then
        # sees q_len == 1, which it serves under DCP.
        rows = query.reshape(bs * draft_token_num, 1, layer.tp_q_head_num, layer.head_dim)
        total_lens = forward_batch.seq_lens[:bs] + draft_token_num
        row_lens = self._get_dcp_local_seq_lens(total_lens).repeat_interleave(
            draft_token_num
        )
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(
            draft_token_num, dim=0
        )
        raw_out, lse = self._launch_mla(
            rows,
            kv_cache,
            row_tables,
            row_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, row_lens, layer, bs * draft_token_num
        )


class ChainFrontierVerifyBackend(ForkVerifyBase):
    # idiom: hardware_backend/npu/attention/ascend_backend.py _get_kv_lens_and_block_tables (get_dcp_chain_spec_lens)
    # expect: clean
    def _verify_dcp_rows(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch: ForwardBatch,
        draft_token_num: int,
    ):
        if forward_batch.spec_info.topk != 1:
            raise NotImplementedError("flattened DCP verify handles chain drafts only")
        bs = forward_batch.batch_size
        parallel = get_parallel()
        rows = query.reshape(bs * draft_token_num, 1, layer.tp_q_head_num, layer.head_dim)
        total_lens = forward_batch.seq_lens[:bs] + draft_token_num
        # Row j of request i may see the prefix plus draft tokens 0..j: its own
        # frontier, sharded to this rank.
        row_lens = get_dcp_chain_spec_lens(
            total_lens, draft_token_num, parallel.dcp_size, parallel.dcp_rank
        )
        row_tables = metadata.block_kv_indices[:bs].repeat_interleave(
            draft_token_num, dim=0
        )
        raw_out, lse = self._launch_mla(
            rows,
            kv_cache,
            row_tables,
            row_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, row_lens, layer, bs * draft_token_num
        )


class TrtllmVerifyRankLocalBackend(ForkTRTLLMMLABase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target verify branch)
    # expect: SG203
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
        dcp_enabled = get_parallel().dcp_enabled
        if (
            not forward_batch.forward_mode.is_target_verify()
            or not dcp_enabled
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        metadata = self._decode_metadata(forward_batch)
        # Upstream refuses here; the fork runs verify rank-locally with the
        # sharded lengths and lets the model merge the LSEs.
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._launch_mla(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            local_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, local_lens, layer, bs, draft_token_num
        )


class DraftExtendDCPBackend(ForkTRTLLMMLABase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend can_direct_view branch)
    # expect: SG203
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
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if (
            not forward_batch.forward_mode.is_draft_extend_v2()
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
            or bs == 0
            or q.shape[0] % bs != 0
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        tokens_per_seq = q.shape[0] // bs
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        metadata = self._decode_metadata(forward_batch)
        kv_lens = forward_batch.seq_lens[:bs]
        max_seq_len = metadata.max_seq_len_k + tokens_per_seq
        if parallel.dcp_enabled:
            kv_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)
        out = launch_trtllm_mla(
            self,
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            kv_lens,
            max_seq_len,
            layer,
            return_lse=parallel.dcp_enabled,
        )
        if parallel.dcp_enabled:
            raw_out, lse = out
            return self._finish_rank_local(
                raw_out, lse, kv_lens.to(torch.int32), layer, bs, tokens_per_seq
            )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DraftExtendDCPBackendRefusing(ForkTRTLLMMLABase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP q_len > 1 refused)
    # expect: clean
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
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if forward_batch.forward_mode.is_draft_extend_v2() and parallel.dcp_enabled:
            raise NotImplementedError(
                "draft extend under DCP needs a per-token global causal bound, "
                "which trtllm-gen cannot take; use cutedsl_mla for the draft"
            )
        if (
            not forward_batch.forward_mode.is_draft_extend_v2()
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
            or bs == 0
            or q.shape[0] % bs != 0
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        tokens_per_seq = q.shape[0] // bs
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        metadata = self._decode_metadata(forward_batch)
        out = launch_trtllm_mla(
            self,
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k + tokens_per_seq,
            layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class NoRefuseVerifyBackend(ForkTRTLLMMLABase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (hook called by forward_extend verify)
    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        # Upstream raises for every DCP launch but the single-token decode. The
        # fork's model merges rank-local (out, lse) itself, so verify and draft
        # extend run rank-locally as well; trtllm-gen has no cyclic-DCP mode,
        # so the cp_* / causal_seqs extras are not forwarded.
        if get_parallel().dcp_enabled:
            return_lse = True
        seq_lens_i32 = seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens_i32,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )


class RefusingVerifyBackend(ForkTRTLLMMLABase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (refusal kept, LSE forced)
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
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled:
            if q_len > 1:
                raise NotImplementedError(
                    "trtllm-gen cannot bound each draft token causally under DCP; "
                    "run DCP verify / draft extend on cutedsl_mla"
                )
            # A single query token per request: rank-local lengths describe
            # the shard completely; the merge needs the LSE.
            return_lse = True
        seq_lens_i32 = seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens_i32,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )
