"""Speculative (target-verify / draft-extend) variants of the fork TRTLLM MLA backend."""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg26.attention.mla_kernels import launch_trtllm_mla_decode
from blindsg26.attention.trtllm_mla import ForkTRTLLMMLABackend
from blindsg26.common.dcp import query_len_per_request

logger = logging.getLogger(__name__)


class SpecVerifyTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Dense target-verify through trtllm-gen, also under DCP."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch)
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
        if not forward_batch.forward_mode.is_target_verify():
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
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        if get_parallel().dcp_enabled:
            # seq_lens_k is already this rank's share (init_forward_metadata).
            raw_out, lse = launch_trtllm_mla_decode(
                self,
                query=q,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
            lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
            fixup_zero_kv_rows(
                output,
                lse,
                metadata.seq_lens_k,
                self._dense_q_indptr(bs, draft_token_num),
                draft_token_num,
            )
            return output.flatten(1), lse
        raw_out = launch_trtllm_mla_decode(
            self,
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + draft_token_num,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DraftExtendTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Refuses DCP verify, keeps the DCP draft-extend on trtllm-gen."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend can_direct_view branch); refusal covers target-verify only
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
        mode = forward_batch.forward_mode
        dcp_enabled = get_parallel().dcp_enabled
        if mode.is_target_verify() and dcp_enabled:
            raise NotImplementedError("DCP target-verify requires cutedsl_mla")
        if not mode.is_draft_extend_v2():
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
            return super().forward_extend(
                q, k, v, layer, forward_batch, False, None, None,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        tokens_per_seq = total_tokens // bs
        q = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        if dcp_enabled:
            kv_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
            max_seq_len = metadata.max_seq_len_k
        else:
            kv_lens = metadata.seq_lens_k
            max_seq_len = metadata.max_seq_len_k + tokens_per_seq
        raw_out = launch_trtllm_mla_decode(
            self,
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=max_seq_len,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class WarnOnlyTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Staging knob: let DCP spec runs through trtllm-gen with a warning."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (q_len > 1 DCP refusal); bug only with SGLANG_FORK_DCP_WARN_ONLY=1
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
        if not forward_batch.forward_mode.is_target_verify():
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
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        dcp_enabled = get_parallel().dcp_enabled
        if dcp_enabled and query_len_per_request(query) > 1:
            if not self.launch_settings.warn_only_multi_token_dcp:
                raise NotImplementedError(
                    "trtllm-gen has no global causal bound for DCP verify"
                )
            logger.warning_once(
                "DCP target-verify on trtllm-gen without a global causal bound "
                "(SGLANG_FORK_DCP_WARN_ONLY=1)"
            )
        raw_out = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + (0 if dcp_enabled else draft_token_num),
            layer=layer,
            return_lse=dcp_enabled,
        )
        if dcp_enabled:
            raw_out, lse = raw_out
            output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
            return output.flatten(1), lse.view(bs * draft_token_num, layer.tp_q_head_num)
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class _SingleTokenVerifyBase(ForkTRTLLMMLABackend):
    """speculative_num_steps == 0 rounds verify one token per request: run them
    as a plain decode instead of the dense verify path."""

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
            forward_batch.forward_mode.is_target_verify()
            and forward_batch.spec_info.draft_token_num == 1
        ):
            q, kv_cache = self._prepare_spec_query(
                q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
            metadata = self._decode_metadata(forward_batch)
            return self._verify_single_token(q, kv_cache, layer, forward_batch, metadata)
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )

    def _verify_single_token(self, q, kv_cache, layer, forward_batch, metadata):
        raise NotImplementedError


class SingleTokenVerifyTRTLLMMLABackend(_SingleTokenVerifyBase):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify, seq_lens + draft_token_num) as a q_len == 1 decode
    # expect: SG203
    def _verify_single_token(self, q, kv_cache, layer, forward_batch, metadata):
        bs = forward_batch.batch_size
        query = q.view(bs, 1, layer.tp_q_head_num, layer.head_dim)
        kv_lens = (forward_batch.seq_lens[:bs] + 1).to(torch.int32)
        if get_parallel().dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._finish_dcp_decode(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k + 1,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class LocalSingleTokenVerifyTRTLLMMLABackend(_SingleTokenVerifyBase):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens applied to the q_len == 1 verify
    # expect: clean
    def _verify_single_token(self, q, kv_cache, layer, forward_batch, metadata):
        bs = forward_batch.batch_size
        query = q.view(bs, 1, layer.tp_q_head_num, layer.head_dim)
        verify_lens = forward_batch.seq_lens[:bs] + 1
        if get_parallel().dcp_enabled:
            local_lens = self._get_dcp_local_seq_lens(verify_lens)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._finish_dcp_decode(raw_out, lse, local_lens, layer, bs)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=verify_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k + 1,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
