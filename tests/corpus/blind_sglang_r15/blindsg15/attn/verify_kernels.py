"""Multi-token (target verify / draft extend) MLA decode launches.

With more than one query token per request each token has its own causal
limit; under DCP only the cute-dsl kernel with ``causal_seqlens_kv_global``
can place them inside this rank's interleaved slice.
"""

from __future__ import annotations

import logging

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg15.attn.dcp_utils import ForkMLAQueryMixin, launch_mla_decode

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class _ForkVerifyBase(ForkMLAQueryMixin, TRTLLMMLABackend):
    def _verify_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query, kv_cache = self._fork_prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        return query, kv_cache, self._fork_metadata(forward_batch), bs, ndt

    def _dense_out(self, raw_out, layer):
        return raw_out.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)


class ForkDirectVerifyMLABackend(_ForkVerifyBase):
    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        parallel = get_parallel()
        query, kv_cache, metadata, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if parallel.dcp_enabled:
            # seq_lens_k is already this rank's share; max bound too.
            kv_lens = metadata.seq_lens_k
            max_seq_len = metadata.max_seq_len_k
        else:
            kv_lens = metadata.seq_lens_k
            max_seq_len = metadata.max_seq_len_k + ndt
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=parallel.dcp_enabled,
        )
        if parallel.dcp_enabled:
            raw_out, lse = out
            return self._dense_out(raw_out, layer), lse.view(
                bs * ndt, layer.tp_q_head_num
            )
        return self._dense_out(out, layer)


class ForkRefusingVerifyMLABackend(_ForkVerifyBase):
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "fork trtllm verify cannot pass a global causal bound; use "
                "cutedsl_mla for DCP speculative decoding"
            )
        query, kv_cache, metadata, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + ndt,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._dense_out(out, layer)


class ForkCausalVerifyMLABackend(_ForkVerifyBase):
    # expect: clean
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        parallel = get_parallel()
        query, kv_cache, metadata, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        common = dict(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        if parallel.dcp_enabled:
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                **common,
                max_seq_len=metadata.max_seq_len_k,
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                causal_seqlens_kv_global=metadata.global_seq_lens_k,
                return_lse=True,
            )
            return self._dense_out(raw_out, layer), lse.view(
                bs * ndt, layer.tp_q_head_num
            )
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            **common, max_seq_len=metadata.max_seq_len_k + ndt
        )
        return self._dense_out(out, layer)


class ForkDraftExtendMLABackend(_ForkVerifyBase):
    """Uniform-width draft extend (num_draft_tokens per request)."""

    def _draft_extend_query(self, q, k, layer, forward_batch, save_kv_cache,
                            q_rope, k_rope):
        query, kv_cache = self._fork_prepare_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        bs = forward_batch.batch_size
        width = forward_batch.spec_info.num_tokens_per_req
        query = query.view(bs, width, layer.tp_q_head_num, layer.head_dim)
        return query, kv_cache, self._fork_metadata(forward_batch), bs, width

    # expect: SG203
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs, width = self._draft_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled:
            kv_lens = self._get_dcp_local_seq_lens(kv_lens)
        out = launch_mla_decode(
            self,
            query.to(self.data_type),
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k + width,
            layer,
            return_lse=get_parallel().dcp_enabled,
        )
        if isinstance(out, tuple):
            return self._dense_out(out[0], layer), out[1]
        return self._dense_out(out, layer)

    # expect: clean
    def forward_draft_extend_dcp(self, q, k, layer, forward_batch,
                                 save_kv_cache=True, q_rope=None, k_rope=None):
        query, kv_cache, metadata, bs, width = self._draft_extend_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens = forward_batch.seq_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = launch_mla_decode(
                self,
                query.to(self.data_type),
                kv_cache,
                metadata.block_kv_indices,
                self._get_dcp_local_seq_lens(global_lens),
                self._get_dcp_local_max_seq_len(self.max_context_len),
                layer,
                causal_global=global_lens,
            )
            return self._dense_out(raw_out, layer), lse
        out = launch_mla_decode(
            self,
            query.to(self.data_type),
            kv_cache,
            metadata.block_kv_indices,
            global_lens,
            metadata.max_seq_len_k + width,
            layer,
        )
        return self._dense_out(out, layer)


class ForkSplitLaunchVerifyMLABackend(_ForkVerifyBase):
    def _launch_multi(self, query, kv_cache, block_tables, kv_lens, max_seq_len,
                      layer, return_lse=False):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=kv_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
        )

    # expect: SG203
    def forward_target_verify(self, q, k, layer, forward_batch, save_kv_cache=True,
                              q_rope=None, k_rope=None):
        query, kv_cache, metadata, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        max_seq_len = metadata.max_seq_len_k + (0 if dcp else ndt)
        out = self._launch_multi(
            query.to(self.data_type),
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            max_seq_len,
            layer,
            return_lse=dcp,
        )
        if dcp:
            return self._dense_out(out[0], layer), out[1]
        return self._dense_out(out, layer)

    # expect: clean
    def forward_target_verify_via_hook(self, q, k, layer, forward_batch,
                                       save_kv_cache=True, q_rope=None, k_rope=None):
        query, kv_cache, metadata, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        # The trtllm hook refuses q_len > 1 under DCP (no causal bound on
        # trtllm-gen), so a DCP deployment fails loudly here.
        out = self._run_decode_kernel(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + (0 if dcp else ndt),
            layer=layer,
            return_lse=dcp,
        )
        return self._dense_out(out, layer)


class ForkNoDcpVerifyMLABackend(_ForkVerifyBase):
    """Verify backend for the fork's non-DCP fleet; refuses DCP at build."""

    def __init__(self, model_runner, skip_prefill=False, kv_indptr_buf=None,
                 q_indptr_decode_buf=None):
        if get_parallel().attn_dcp_size > 1:
            raise ValueError("ForkNoDcpVerifyMLABackend does not support --dcp-size > 1")
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)

    # expect: clean
    def forward_target_verify(self, q, k, layer, forward_batch, save_kv_cache=True,
                              q_rope=None, k_rope=None):
        query, kv_cache, metadata, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k + ndt,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._dense_out(out, layer)
