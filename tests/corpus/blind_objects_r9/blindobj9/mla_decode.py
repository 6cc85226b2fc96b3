# SPDX-License-Identifier: Apache-2.0
"""Fork FlashInfer MLA decode launch for non-causal DSpark blocks under DCP."""
from typing import Any

import torch

try:
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
except ImportError:  # pragma: no cover
    trtllm_batch_decode_with_kv_cache_mla = None


def _expand_rows(decode, num_rows: int):
    cu = decode.query_start_loc
    rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
    row_req = torch.searchsorted(cu[1:], rows, right=True)
    return decode.block_table[row_req], decode.seq_lens[row_req], row_req


def _launch(impl, q, kv_cache, workspace, block_table, seq_lens, max_seq_len, extra):
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=workspace,
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=impl.bmm1_scale,
        bmm2_scale=impl.bmm2_scale,
        **extra,
    )


# idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
# expect: SG202
def decode_noncausal_dcp(impl, q, kv_cache, workspace, attn_metadata):
    decode = attn_metadata.decode
    block_table, seq_lens = decode.block_table, decode.seq_lens
    if not attn_metadata.causal:
        q = q.unsqueeze(1)
        block_table, seq_lens, _ = _expand_rows(decode, q.shape[0])
    extra: dict[str, Any] = {}
    if impl.dcp_world_size > 1:
        extra.update(
            enable_dcp=True,
            cp_world=impl.dcp_world_size,
            cp_rank=impl.dcp_rank,
            causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=workspace,
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=impl.bmm1_scale,
        bmm2_scale=impl.bmm2_scale,
        **extra,
    )


# idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
# expect: clean
def decode_noncausal_dcp_fixed(impl, q, kv_cache, workspace, attn_metadata):
    decode = attn_metadata.decode
    block_table, seq_lens = decode.block_table, decode.seq_lens
    row_req = None
    if not attn_metadata.causal:
        q = q.unsqueeze(1)
        block_table, seq_lens, row_req = _expand_rows(decode, q.shape[0])
    extra: dict[str, Any] = {}
    if impl.dcp_world_size > 1:
        bound = decode.dcp_tot_seq_lens
        if row_req is not None:
            bound = bound[row_req]
        extra.update(
            enable_dcp=True,
            cp_world=impl.dcp_world_size,
            cp_rank=impl.dcp_rank,
            causal_seqlens_kv_global=bound,
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=workspace,
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=impl.bmm1_scale,
        bmm2_scale=impl.bmm2_scale,
        **extra,
    )


# idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
# expect: SG202
def decode_uniform_dcp(impl, q, kv_cache, workspace, attn_metadata):
    decode = attn_metadata.decode
    query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
    block_table, seq_lens, row_req = _expand_rows(decode, q.shape[0])
    q = q.unsqueeze(1)
    bound = decode.dcp_tot_seq_lens
    # uniform blocks: interleave is cheaper than the gather
    bound = bound.repeat_interleave(query_len)
    extra = {
        "enable_dcp": True,
        "cp_world": impl.dcp_world_size,
        "cp_rank": impl.dcp_rank,
        "causal_seqlens_kv_global": bound,
    }
    return _launch(
        impl, q, kv_cache, workspace, block_table, seq_lens, attn_metadata.max_seq_len, extra
    )


# idiom: vllm/v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
# expect: clean
def decode_uniform_dcp_fixed(impl, q, kv_cache, workspace, attn_metadata):
    decode = attn_metadata.decode
    query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
    q = q.unsqueeze(1)
    block_table = decode.block_table.repeat_interleave(query_len, dim=0)
    seq_lens = decode.seq_lens.repeat_interleave(query_len)
    bound = decode.dcp_tot_seq_lens.repeat_interleave(query_len)
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=workspace,
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=impl.bmm1_scale,
        bmm2_scale=impl.bmm2_scale,
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        causal_seqlens_kv_global=bound,
    )
