"""Fork cute-dsl MLA backend: DCP decode / target-verify with the global causal bound."""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg26.attention.mla_kernels import launch_cute_dsl_mla_dcp
from blindsg26.attention.query_prep import MlaQueryPrepMixin
from blindsg26.common.settings import DcpLayout, MlaLaunchSettings

logger = logging.getLogger(__name__)


class ForkCuteDslMLABackend(MlaQueryPrepMixin, CuteDslMLABackend):
    def __init__(
        self,
        model_runner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.launch_settings = MlaLaunchSettings.from_model_runner(model_runner)
        self.dcp = DcpLayout.current()

    def _spec_output(self, raw_out, lse, local_lens, layer, bs, tokens_per_req):
        rows = bs * tokens_per_req
        output = raw_out.view(rows, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(rows, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_lens, self._dense_q_indptr(bs, tokens_per_req), tokens_per_req
        )
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (rank-local seq_lens + causal_seqs global)
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
        parallel = get_parallel()
        if (
            not parallel.dcp_enabled
            or self.data_type == torch.float8_e4m3fn
            or cos_sin_cache is not None
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_seq_lens = get_dcp_lens(
            global_seq_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
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
        return self._finish_dcp_decode(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify with causal_seqs=global_seq_lens_k) on cute-dsl; draft-extend refused
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
        mode = forward_batch.forward_mode
        parallel = get_parallel()
        spec_mode = mode.is_target_verify() or mode.is_draft_extend_v2()
        if not parallel.dcp_enabled or not spec_mode or self.data_type == torch.float8_e4m3fn:
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if mode.is_draft_extend_v2():
            raise NotImplementedError(
                "fork cutedsl_mla: DCP draft-extend has no global causal bound wired"
            )
        q, kv_cache = self._prepare_spec_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._spec_output(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class CopyPasteCuteDslMLABackend(ForkCuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; bug only on the un-hoisted fallback branch (metadata without seq_lens_k / global_seq_lens_k)
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
        parallel = get_parallel()
        if not parallel.dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
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
        return self._finish_dcp_decode(raw_out, lse, local_seq_lens, layer, bs)


class GlobalVerifyCuteDslMLABackend(ForkCuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify) on cute-dsl
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
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_target_verify()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        q, kv_cache = self._prepare_spec_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        verify_lens = metadata.global_seq_lens_k
        raw_out, lse = self._run_decode_kernel(
            query=q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=verify_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=verify_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._spec_output(raw_out, lse, metadata.seq_lens_k, layer, bs, draft_token_num)


class DirectDraftExtendCuteDslMLABackend(ForkCuteDslMLABackend):
    """Runs the uniform DCP draft-extend on the monolithic cute-dsl kernel."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (enable_dcp + causal_seqlens_kv_global) for draft-extend
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
        if not (self.dcp.enabled and forward_batch.forward_mode.is_draft_extend_v2()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        q, kv_cache = self._prepare_spec_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        total_tokens = q.shape[0]
        if bs == 0 or total_tokens % bs != 0:
            raise NotImplementedError("DCP draft-extend needs a uniform query width")
        tokens_per_seq = total_tokens // bs
        raw_out, lse = launch_cute_dsl_mla_dcp(
            self,
            query=q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            local_seq_lens=metadata.seq_lens_k,
            global_seq_lens=metadata.global_seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return self._spec_output(raw_out, lse, metadata.seq_lens_k, layer, bs, tokens_per_seq)
