"""Speculative (q_len > 1) MLA launches on the fork's DCP deployments.

Target verify and draft extend run the decode kernel with several query
tokens per request.  Under DCP every query token needs its own causal limit
inside this rank's interleaved KV slice, which only the cute-dsl kernel's
``causal_seqlens_kv_global`` provides.
"""

from __future__ import annotations

import logging

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg25.utils.dcp_lens import rank_local_lens, verify_kv_lens
from blindsg25.utils.mla_launch import launch_trtllm_mla_decode
from blindsg25.utils.mla_prep import decode_metadata, split_out_lse

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class DcpVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm-gen verify / draft-extend kernels wired for DCP ranks."""

    def _forward_verify_dcp(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target verify)
        # expect: SG203
        assert get_parallel().dcp_enabled
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        # Rank-local lens + this rank's page table: the kernel only walks the
        # slice this rank holds.
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        return output.flatten(1), lse

    def _forward_verify_dcp_helper(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP verify via launch helper)
        # expect: SG203
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        dcp = get_parallel().dcp_enabled
        kv_lens = verify_kv_lens(forward_batch.seq_lens, draft_token_num)
        if dcp:
            kv_lens = rank_local_lens(kv_lens)
        out = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        return out

    def _forward_draft_extend_dcp(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP draft extend, cute-dsl kernel)
        # expect: SG203
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        extra = {"backend": "cute-dsl"} if parallel.dcp_enabled else {}
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            **extra,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        return output.flatten(1), lse

    def _forward_spec_dcp(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (verify lens rebuilt) -- path: DCP target verify
        # expect: SG203
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        q_len = q.shape[0] // bs
        query = q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
        seq_lens = metadata.seq_lens_k
        if forward_batch.forward_mode.is_target_verify():
            # Verify rows also attend the draft window written this step.
            seq_lens = (forward_batch.seq_lens + forward_batch.spec_info.draft_token_num).to(
                torch.int32
            )
        return launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
        )

    def _forward_draft_extend_guarded(self, query, kv_cache, layer, forward_batch, *, return_lse=False):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (refusal keyed on return_lse) -- path: DCP with return_lse=False
        # expect: SG203
        if get_parallel().dcp_enabled and return_lse:
            raise NotImplementedError(
                "trtllm_mla returns no rank-local LSE for a DCP draft extend"
            )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        query = query.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        return launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
        )

    def _forward_spec_guarded(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (refuses DCP target verify only) -- path: DCP draft extend
        # expect: SG203
        dcp = get_parallel().dcp_enabled
        if dcp and forward_batch.forward_mode.is_target_verify():
            raise NotImplementedError(
                "DCP target verify needs cutedsl_mla (global causal bound)"
            )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        query = q.view(bs, q.shape[0] // bs, layer.tp_q_head_num, layer.head_dim)
        out = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        return out


class GuardedVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """Verify / draft extend that either carries the global bound or refuses."""

    def _forward_verify_dcp(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (enable_dcp verify)
        # expect: clean
        parallel = get_parallel()
        assert parallel.dcp_enabled
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num), draft_token_num,
        )
        return output.flatten(1), lse

    def _forward_verify_dcp_helper(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata (global + local verify lens)
        # expect: clean
        parallel = get_parallel()
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        global_kv_lens = verify_kv_lens(forward_batch.seq_lens[:bs], draft_token_num)
        return launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_local_lens(global_kv_lens),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            causal_seqs=global_kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=parallel.dcp_enabled,
        )

    def _forward_draft_extend_dcp(self, q, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP q_len > 1 refused)
        # expect: clean
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm_mla cannot forward a global causal bound to its decode "
                "kernel, which DCP draft extend needs; select cutedsl_mla"
            )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        query = q.view(bs, q.shape[0] // bs, layer.tp_q_head_num, layer.head_dim)
        raw_out = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def _forward_spec_guarded(self, query, kv_cache, layer, forward_batch, *, return_lse=False):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (q_len refusal)
        # expect: clean
        bs = forward_batch.batch_size
        query = query.view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        q_len = query.shape[1]
        if get_parallel().dcp_enabled and (q_len > 1 or not return_lse):
            raise NotImplementedError(
                "trtllm_mla under DCP serves only single-token decode with LSE"
            )
        metadata = decode_metadata(self, forward_batch)
        return launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
        )

    def _forward_decode_dcp(self, query, kv_cache, layer, forward_batch):
        # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (direct trtllm-gen launch)
        # expect: clean
        bs = forward_batch.batch_size
        query = query.view(bs, 1, layer.tp_q_head_num, layer.head_dim)
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        metadata = decode_metadata(self, forward_batch)
        # q_len == 1: the rank-local table + lens describe the shard fully.
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        output, lse = split_out_lse(raw_out, lse, layer)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse
