"""cutedsl_mla forks: speculative (verify / draft extend) support under DCP.

Upstream CuteDslMLABackend only overrides the plain decode; target verify and
draft extend go through TRTLLMMLABackend.forward_extend. These forks route
them to the cute-dsl monolithic kernel, which accepts the global causal bound.
"""

from __future__ import annotations

import logging

import flashinfer
import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.runtime_context import get_parallel

from blindsg11.util.mla_inputs import MlaDecodeInputsMixin

logger = logging.getLogger(__name__)


class SwappedLensCuteDslBackend(CuteDslMLABackend):
    """Converts both length tensors once (the upstream hook converts inline)."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        if cp_world <= 1:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        if causal_seqs is None:
            raise ValueError("causal_seqs is required for DCP MLA decode")
        lens = {
            name: t if t.dtype == torch.int32 else t.to(torch.int32)
            for name, t in (("local", seq_lens), ("global", causal_seqs))
        }
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=lens["global"],
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=lens["global"],
            return_lse=True,
        )


class CheckedCuteDslBackend(CuteDslMLABackend):
    # expect: clean
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        if cp_world <= 1:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        if causal_seqs is None:
            raise ValueError("causal_seqs is required for DCP MLA decode")
        lens = {
            name: t if t.dtype == torch.int32 else t.to(torch.int32)
            for name, t in (("local", seq_lens), ("global", causal_seqs))
        }
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=lens["local"],
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=lens["global"],
            return_lse=True,
        )


class _SpecCuteDslBase(MlaDecodeInputsMixin, CuteDslMLABackend):
    def _finish_spec(self, raw_out, lse, layer, local_lens, bs, tokens_per_req):
        output = raw_out.view(bs * tokens_per_req, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * tokens_per_req, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_lens, self._dense_q_indptr(bs, tokens_per_req),
            tokens_per_req,
        )
        return output.flatten(1), lse


class FallbackCuteDslBackend(_SpecCuteDslBase):
    # expect: SG203
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
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._extend_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs, tokens_per_req = query.shape[0], query.shape[1]
        try:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices,
                seq_lens=md.seq_lens_k,
                max_seq_len=md.max_seq_len_k + tokens_per_req,
                layer=layer,
                causal_seqs=md.global_seq_lens_k,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        except (RuntimeError, ValueError) as err:
            # The monolithic cute-dsl kernel is not built for every SM; fall
            # back to trtllm-gen on the same rank-local page table.
            logger.warning("cute-dsl DCP draft extend unavailable (%s); using trtllm-gen", err)
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query,
                kv_cache=kv_cache,
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=md.block_kv_indices,
                seq_lens=md.seq_lens_k,
                max_seq_len=md.max_seq_len_k + tokens_per_req,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                backend="trtllm-gen",
                return_lse=True,
            )
        return self._finish_spec(raw_out, lse, layer, md.seq_lens_k, bs, tokens_per_req)


class FallbackRefusingCuteDslBackend(_SpecCuteDslBase):
    # expect: clean
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
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._extend_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs, tokens_per_req = query.shape[0], query.shape[1]
        try:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices,
                seq_lens=md.seq_lens_k,
                max_seq_len=md.max_seq_len_k + tokens_per_req,
                layer=layer,
                causal_seqs=md.global_seq_lens_k,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        except (RuntimeError, ValueError) as err:
            # Without the monolithic kernel there is no way to pass the global
            # causal bound; a rank-local-only launch would let every draft
            # row see as far as the last one.
            raise NotImplementedError(
                "DCP draft extend requires the cute-dsl monolithic MLA kernel"
            ) from err
        return self._finish_spec(raw_out, lse, layer, md.seq_lens_k, bs, tokens_per_req)


class VerifyCuteDslBackend(_SpecCuteDslBase):
    # expect: SG203
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
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_target_verify()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._extend_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        # Verify reads the committed prefix plus the draft window.
        kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_spec(raw_out, lse, layer, kv_lens, bs, ndt)


class VerifyLocalCuteDslBackend(_SpecCuteDslBase):
    # expect: clean
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
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_target_verify()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._extend_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        global_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_spec(raw_out, lse, layer, local_lens, bs, ndt)


class DraftExtendCuteDslBackend(_SpecCuteDslBase):
    # expect: clean
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
        parallel = get_parallel()
        if not (parallel.dcp_enabled and forward_batch.forward_mode.is_draft_extend_v2()):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._extend_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs, tokens_per_req = query.shape[0], query.shape[1]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k,
            max_seq_len=md.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=md.global_seq_lens_k.to(torch.int32),
            return_lse=True,
        )
        return self._finish_spec(raw_out, lse, layer, md.seq_lens_k, bs, tokens_per_req)
