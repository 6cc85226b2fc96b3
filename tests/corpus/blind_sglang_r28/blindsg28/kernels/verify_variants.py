"""Target-verify (multi-token query) variants of the DCP MLA port.

Each overrides ``forward_extend`` of :class:`ForkDcpDecodeBase`; non-verify
extends go to the upstream trtllm_mla path.
"""

from __future__ import annotations

from sglang.srt.runtime_context import get_parallel

from blindsg28.kernels import kernels
from blindsg28.kernels.dcp_decode_base import ForkDcpDecodeBase


class _VerifyMixin:
    def _verify_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        return query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim), bs, ndt


class LocalOnlyVerifyBackend(_VerifyMixin, ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend (target verify through the decode kernel), twist: under DCP the fork swaps in rank-local lengths but launches the draft_token_num-wide query without a global causal bound
    # expect: SG203
    def forward_extend(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        query, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        seq_lens = md.local_seq_lens[:bs] if dcp else md.global_seq_lens[:bs]
        out = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            seq_lens,
            md.max_local_len,
            counter_buffer=self._multi_ctas_kv_counter_buffer,
            return_lse=dcp,
            **self._kernel_dims(layer),
        )
        if not dcp:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        return self._rank_local_state(raw_out, lse, layer, seq_lens, bs, ndt)


class CausalBoundVerifyBackend(_VerifyMixin, ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend (DCP target-verify passes causal_seqs=global_seq_lens_k), twist: the generic helper receives the metadata's global bound
    # expect: clean
    def forward_extend(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        query, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if not get_parallel().dcp_enabled:
            raw_out = kernels.launch_mla_decode(
                query,
                self._paged_kv(layer),
                md.block_kv_indices,
                md.global_seq_lens[:bs],
                md.max_local_len,
                counter_buffer=self._multi_ctas_kv_counter_buffer,
                **self._kernel_dims(layer),
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        local_lens = md.local_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            causal_seqlens_kv_global=md.global_seq_lens[:bs],
            **self._dcp_args(),
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, local_lens, bs, ndt)


class RefusingVerifyBackend(_VerifyMixin, ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (refuses q_len > 1 under DCP), twist: the refusal is raised up front in forward_extend; the launch below only runs without DCP
    # expect: clean
    def forward_extend(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen verify has no global causal bound under DCP; "
                "deploy the cute-dsl verify variant instead"
            )
        md = self._metadata_for(forward_batch)
        query, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        raw_out = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            md.global_seq_lens[:bs],
            md.max_local_len,
            counter_buffer=self._multi_ctas_kv_counter_buffer,
            **self._kernel_dims(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class GlobalVerifyBackend(_VerifyMixin, ForkDcpDecodeBase):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend._run_decode_kernel via TRTLLMMLABackend.forward_extend, twist: the verify launch passes the global bound but also the global lengths as the kernel's seq_lens
    # expect: SG203
    def forward_extend(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        query, bs, ndt = self._verify_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if not get_parallel().dcp_enabled:
            raw_out = kernels.launch_mla_decode(
                query,
                self._paged_kv(layer),
                md.block_kv_indices,
                md.global_seq_lens[:bs],
                md.max_local_len,
                **self._kernel_dims(layer),
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        global_lens = md.global_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            global_lens,
            md.max_local_len,
            causal_seqlens_kv_global=global_lens,
            **self._dcp_args(),
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(
            raw_out, lse, layer, md.local_seq_lens[:bs], bs, ndt
        )
