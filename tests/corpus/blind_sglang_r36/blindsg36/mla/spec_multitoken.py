"""Multi-token (target verify / draft extend) MLA launches under DCP.

A query of more than one token per request needs the per-request global
causal bound when the KV is sharded cyclically; otherwise the launch must be
refused.
"""

from __future__ import annotations

from typing import Optional

import flashinfer
import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from .lens import MLA_CFG, split_lens


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch)
# expect: SG203
def verify_forward_dcp_v2(
    backend: CuteDslMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
    *,
    draft_token_num: Optional[int] = None,
    skip_fixup: bool = False,
):
    p = get_parallel()
    bs = forward_batch.batch_size
    ndt = draft_token_num or forward_batch.spec_info.draft_token_num
    meta = forward_batch.decode_trtllm_mla_metadata
    glob = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
    lens = glob

    def _launch(kernel_lens=lens):
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=meta.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            causal_seqs=glob,
            cp_world=p.dcp_size,
            cp_rank=p.dcp_rank,
            return_lse=True,
        )

    lens = backend._get_dcp_local_seq_lens(lens)
    raw_out, lse = _launch()
    out = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(bs * ndt, layer.tp_q_head_num)
    if not skip_fixup:
        fixup_zero_kv_rows(out, lse, lens, backend._dense_q_indptr(bs, ndt), ndt)
    return out.flatten(1), lse


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch)
# expect: clean
def verify_forward_dcp(
    backend: CuteDslMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
    *,
    draft_token_num: Optional[int] = None,
    skip_fixup: bool = False,
):
    p = get_parallel()
    bs = forward_batch.batch_size
    ndt = draft_token_num or forward_batch.spec_info.draft_token_num
    meta = forward_batch.decode_trtllm_mla_metadata
    glob = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
    lens = glob

    def _launch():
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=meta.block_kv_indices,
            seq_lens=lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            causal_seqs=glob,
            cp_world=p.dcp_size,
            cp_rank=p.dcp_rank,
            return_lse=True,
        )

    lens = backend._get_dcp_local_seq_lens(lens)
    raw_out, lse = _launch()
    out = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(bs * ndt, layer.tp_q_head_num)
    if not skip_fixup:
        fixup_zero_kv_rows(out, lse, lens, backend._dense_q_indptr(bs, ndt), ndt)
    return out.flatten(1), lse


def _draft_extend_q(backend, q, forward_batch: ForwardBatch, layer: RadixAttention):
    bs = forward_batch.batch_size
    max_q = max(forward_batch.extend_seq_lens_cpu)
    cu_q = torch.nn.functional.pad(
        torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32), (1, 0)
    )
    padded = torch.zeros((bs, max_q, layer.tp_q_head_num, layer.head_dim),
                         dtype=q.dtype, device=q.device)
    q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    return backend.pad_draft_extend_query(q, padded, forward_batch.extend_seq_lens, cu_q), max_q, cu_q


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (draft extend, tuple of lens)
# expect: SG203
def draft_extend_dcp(
    backend: CuteDslMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    p = get_parallel()
    bs = forward_batch.batch_size
    meta = forward_batch.decode_trtllm_mla_metadata
    padded_q, max_q, cu_q = _draft_extend_q(backend, q, forward_batch, layer)
    # NOTE(draft_extend seq_len handling): K lengths are window-aligned.
    k_lens = forward_batch.seq_lens[:bs] - forward_batch.extend_seq_lens + max_q
    local, glob = split_lens(k_lens)
    raw_out, lse = backend._run_decode_kernel(
        query=padded_q,
        kv_cache=kv_cache,
        block_tables=meta.block_kv_indices,
        seq_lens=local,
        max_seq_len=meta.max_seq_len_k + max_q,
        layer=layer,
        causal_seqs=glob,
        cp_world=p.dcp_size,
        cp_rank=p.dcp_rank,
        return_lse=True,
    )
    out = backend.unpad_draft_extend_output(
        raw_out, cu_q, forward_batch.extend_seq_lens, q.shape[0], zero_uncovered=False
    )
    return out, lse


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (draft extend, tuple of lens)
# expect: clean
def draft_extend_dcp_v2(
    backend: CuteDslMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    p = get_parallel()
    bs = forward_batch.batch_size
    meta = forward_batch.decode_trtllm_mla_metadata
    padded_q, max_q, cu_q = _draft_extend_q(backend, q, forward_batch, layer)
    k_lens = forward_batch.seq_lens[:bs] - forward_batch.extend_seq_lens + max_q
    glob, local = split_lens(k_lens)
    raw_out, lse = backend._run_decode_kernel(
        query=padded_q,
        kv_cache=kv_cache,
        block_tables=meta.block_kv_indices,
        seq_lens=local,
        max_seq_len=meta.max_seq_len_k + max_q,
        layer=layer,
        causal_seqs=glob,
        cp_world=p.dcp_size,
        cp_rank=p.dcp_rank,
        return_lse=True,
    )
    out = backend.unpad_draft_extend_output(
        raw_out, cu_q, forward_batch.extend_seq_lens, q.shape[0], zero_uncovered=False
    )
    return out, lse


def _compact_launch(backend: TRTLLMMLABackend, query, kv_cache, meta, cu_q, max_q, layer):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=meta.block_kv_indices,
        seq_lens=meta.seq_lens_k,
        max_seq_len=meta.max_seq_len_k + max_q,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        cum_seq_lens_q=cu_q,
        max_q_len=max_q,
        backend="trtllm-gen",
        multi_ctas_kv_counter_buffer=backend._multi_ctas_kv_counter_buffer,
    )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal)
# expect: SG203
def spec_decode_trtllm_guarded_v2(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    p = get_parallel()
    meta = forward_batch.decode_trtllm_mla_metadata
    mode = forward_batch.forward_mode
    assert mode.is_target_verify() or mode.is_draft_extend_v2(), mode
    if mode.is_target_verify():
        q_lens = torch.full_like(forward_batch.seq_lens, forward_batch.spec_info.draft_token_num)
        max_q = int(forward_batch.spec_info.draft_token_num)
    else:
        q_lens = forward_batch.extend_seq_lens
        max_q = max(forward_batch.extend_seq_lens_cpu)
    cu_q = torch.nn.functional.pad(torch.cumsum(q_lens, dim=0, dtype=torch.int32), (1, 0))
    # Compact var-q layout: [total_q, heads, head_dim].
    query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    q_len = query.shape[1] if query.dim() == 4 else 1
    if p.dcp_enabled and q_len > 1:
        raise NotImplementedError(
            "trtllm-gen has no global causal bound for a multi-token DCP query"
        )
    # meta.seq_lens_k is rank-local under DCP (init_forward_metadata).
    raw_out = _compact_launch(backend, query, kv_cache, meta, cu_q, max_q, layer)
    return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal)
# expect: clean
def spec_decode_trtllm_guarded(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    p = get_parallel()
    meta = forward_batch.decode_trtllm_mla_metadata
    mode = forward_batch.forward_mode
    assert mode.is_target_verify() or mode.is_draft_extend_v2(), mode
    if p.dcp_enabled and (mode.is_target_verify() or mode.is_draft_extend_v2()):
        raise NotImplementedError(
            "trtllm-gen has no global causal bound for a multi-token DCP query; "
            "select cutedsl_mla"
        )
    if mode.is_target_verify():
        q_lens = torch.full_like(forward_batch.seq_lens, forward_batch.spec_info.draft_token_num)
        max_q = int(forward_batch.spec_info.draft_token_num)
    else:
        q_lens = forward_batch.extend_seq_lens
        max_q = max(forward_batch.extend_seq_lens_cpu)
    cu_q = torch.nn.functional.pad(torch.cumsum(q_lens, dim=0, dtype=torch.int32), (1, 0))
    query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    raw_out = _compact_launch(backend, query, kv_cache, meta, cu_q, max_q, layer)
    return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
