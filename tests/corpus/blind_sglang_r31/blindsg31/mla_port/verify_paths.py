"""Verification and draft-extend attention paths for the ported MLA backends.

Both paths attend a multi-token query per request (``draft_token_num`` rows
for verify, ``num_tokens_per_req`` for draft extend). Under DCP a rank-local
length cannot express the causal mask between those rows and the rank's KV
shard, so the launch needs the global lengths as a separate causal bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.runtime_context import get_parallel

from blindsg31.mla_port import kernel_shim
from blindsg31.mla_port.lengths import RankLens, local_lens, local_max_len

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class RocmVerifyMixin:
    """Mixed into the port's TRTLLMMLABackend subclasses."""

    def _dims(self, layer):
        return dict(
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target verify); local seq_lens_k plus global_seq_lens_k as causal_seqlens_kv_global
    # expect: clean
    def forward_target_verify_dcp(self, q, kv_cache, layer, forward_batch: "ForwardBatch", metadata):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = kernel_shim.cute_dsl_mla_decode_dcp(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k,
            causal_seqlens_kv_global=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            **self._dims(layer),
        )
        output = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * ndt, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, metadata.seq_lens_k, self._dense_q_indptr(bs, ndt), ndt
        )
        return output.flatten(1), lse

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft extend); DCP draft-extend launch with rank-local lengths, no causal bound
    # expect: SG203
    def forward_draft_extend_dcp(self, q, kv_cache, layer, forward_batch: "ForwardBatch", metadata):
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        query = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = kernel_shim.trtllm_gen_mla_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + tokens_per_req,
            return_lse=True,
            **self._dims(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal); draft extend refuses DCP when q_len > 1
    # expect: clean
    def forward_draft_extend_dcp_guarded(self, q, kv_cache, layer, forward_batch: "ForwardBatch", metadata):
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        if get_parallel().dcp_enabled and tokens_per_req > 1:
            raise NotImplementedError(
                "draft extend under DCP needs a global causal bound; "
                "the trtllm-gen kernel cannot take one"
            )
        # Single-token rows under DCP: seq_lens_k is already rank-local
        # (hoisted by init_forward_metadata); request the LSE for the merge.
        dcp = get_parallel().dcp_enabled
        query = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        out = kernel_shim.trtllm_gen_mla_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            metadata.seq_lens_k,
            metadata.max_seq_len_k + tokens_per_req,
            return_lse=dcp,
            **self._dims(layer),
        )
        if dcp:
            raw_out, lse = out
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), lse
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend; refuses DCP for target verify only, the draft-extend branch launches a multi-token DCP query with no bound
    # expect: SG203
    def forward_spec_extend(self, q, kv_cache, layer, forward_batch: "ForwardBatch", metadata):
        parallel = get_parallel()
        mode = forward_batch.forward_mode
        if mode.is_target_verify() and parallel.dcp_enabled:
            raise NotImplementedError("DCP target verify: use cutedsl_mla")
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        lens = RankLens.from_global(forward_batch.seq_lens[:bs])
        query = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        out = kernel_shim.trtllm_gen_mla_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            lens.kernel,
            local_max_len(metadata.max_seq_len_k) + tokens_per_req,
            return_lse=parallel.dcp_enabled,
            **self._dims(layer),
        )
        return out


class AiterVerifyPaths:
    """aiter cp-round-robin verify (gfx950 asm)."""

    def __init__(self, backend):
        self.backend = backend
        self.dcp_world_size = get_parallel().attn_dcp_size

    # idiom: layers/attention/aiter_backend.py AiterAttnBackend._forward_verify_asm_cprr; local kv_indptr plus the global g_kv_indptr, cp_world_size/cp_rank, causal
    # expect: clean
    def verify_cprr(self, q, layer, forward_batch: "ForwardBatch", fm):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        global_lens = forward_batch.seq_lens[:bs] + ndt
        n_rows = bs * ndt
        out = q.new_empty((n_rows, layer.tp_q_head_num, layer.v_head_dim))
        _, lse = kernel_shim.aiter_mla_decode(
            q.view(n_rows, layer.tp_q_head_num, layer.qk_head_dim),
            self.backend.token_to_kv_pool.get_key_buffer(layer.layer_id).view(
                -1, 1, 1, layer.qk_head_dim
            ),
            out,
            fm.qo_indptr,
            kernel_shim.csr_from_lens(local_lens(global_lens)),
            fm.cprr_kv_indices,
            fm.kv_last_page_len,
            ndt,
            sm_scale=layer.scaling,
            return_lse=True,
            g_kv_indptr=kernel_shim.csr_from_lens(global_lens.to(torch.int32)),
            cp_world_size=self.dcp_world_size,
            cp_rank=get_parallel().attn_dcp_rank,
            causal=True,
        )
        return out, lse.view(n_rows, layer.tp_q_head_num)

    # idiom: layers/attention/aiter_backend.py AiterAttnBackend._forward_verify_asm_cprr; passes the rank-local kv_indptr as g_kv_indptr, so the causal bound is not global
    # expect: SG203
    def verify_cprr_local_bound(self, q, layer, forward_batch: "ForwardBatch", fm):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        n_rows = bs * ndt
        local_indptr = kernel_shim.csr_from_lens(
            local_lens(forward_batch.seq_lens[:bs] + ndt)
        )
        out = q.new_empty((n_rows, layer.tp_q_head_num, layer.v_head_dim))
        _, lse = kernel_shim.aiter_mla_decode(
            q.view(n_rows, layer.tp_q_head_num, layer.qk_head_dim),
            self.backend.token_to_kv_pool.get_key_buffer(layer.layer_id).view(
                -1, 1, 1, layer.qk_head_dim
            ),
            out,
            fm.qo_indptr,
            local_indptr,
            fm.cprr_kv_indices,
            fm.kv_last_page_len,
            ndt,
            sm_scale=layer.scaling,
            return_lse=True,
            g_kv_indptr=local_indptr,
            cp_world_size=self.dcp_world_size,
            cp_rank=get_parallel().attn_dcp_rank,
            causal=True,
        )
        return out, lse.view(n_rows, layer.tp_q_head_num)
