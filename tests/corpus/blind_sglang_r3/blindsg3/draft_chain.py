"""Fused multi-step draft decode and chain-verify helpers for the fork's
EAGLE path on TRTLLM-MLA / cute-dsl backends."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

import torch

from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg3.dcp_utils import local_max_seq_len

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


# expect: SG203
def run_fused_draft_steps(
    backend: "TRTLLMMLABackend",
    step_queries: List[torch.Tensor],
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
):
    """Run ``len(step_queries)`` single-token draft decodes back to back; step
    ``i`` sees the prefix plus ``i + 1`` draft tokens."""
    parallel = get_parallel()
    bs = forward_batch.batch_size
    base_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    max_base = int(forward_batch.seq_lens_cpu[:bs].max().item())
    outs, lses = [], []
    for step, query in enumerate(step_queries):
        step_lens = base_lens + (step + 1)
        max_len = max_base + step + 1
        if parallel.dcp_enabled:
            max_len = local_max_seq_len(max_len)
        raw_out, lse = backend._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=step_lens,
            max_seq_len=max_len,
            layer=layer,
            return_lse=True,
        )
        outs.append(raw_out)
        lses.append(lse)
    return outs, lses


# expect: clean
def run_fused_draft_steps_local(
    backend: "TRTLLMMLABackend",
    step_queries: List[torch.Tensor],
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    base_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    max_base = int(forward_batch.seq_lens_cpu[:bs].max().item())
    outs, lses = [], []
    for step, query in enumerate(step_queries):
        step_lens = base_lens + (step + 1)
        max_len = max_base + step + 1
        if parallel.dcp_enabled:
            step_lens = get_dcp_lens(step_lens, parallel.dcp_size, parallel.dcp_rank)
            max_len = local_max_seq_len(max_len)
        raw_out, lse = backend._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=step_lens,
            max_seq_len=max_len,
            layer=layer,
            return_lse=True,
        )
        outs.append(raw_out)
        lses.append(lse)
    return outs, lses


def _chain_global_frontiers(total_kv_lens: torch.Tensor, tokens_per_req: int) -> torch.Tensor:
    total_kv_lens = total_kv_lens.int()
    steps = torch.arange(
        1, tokens_per_req + 1, dtype=total_kv_lens.dtype, device=total_kv_lens.device
    )
    frontiers = total_kv_lens.unsqueeze(1) - tokens_per_req + steps
    frontiers = torch.where(
        total_kv_lens.unsqueeze(1) >= tokens_per_req,
        frontiers,
        torch.zeros_like(frontiers),
    )
    return frontiers.reshape(-1)


# expect: SG203
def run_chain_verify_as_rows(
    backend: "TRTLLMMLABackend",
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
):
    """Chain (topk=1) target-verify under DCP on trtllm-gen: every draft token
    becomes its own single-token decode row whose KV frontier ends at that
    token, so the kernel needs no per-query causal bound."""
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    tokens_per_req = forward_batch.spec_info.draft_token_num
    rows = bs * tokens_per_req
    query = q.view(rows, 1, layer.tp_q_head_num, layer.head_dim)
    block_tables = metadata.block_kv_indices[:bs].repeat_interleave(tokens_per_req, dim=0)
    row_lens = _chain_global_frontiers(metadata.global_seq_lens_k[:bs], tokens_per_req)
    raw_out, lse = backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=row_lens,
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
        return_lse=True,
    )
    return raw_out.view(rows, -1), lse.view(rows, -1)


# expect: clean
def run_chain_verify_as_rows_local(
    backend: "TRTLLMMLABackend",
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
):
    parallel = get_parallel()
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    tokens_per_req = forward_batch.spec_info.draft_token_num
    rows = bs * tokens_per_req
    query = q.view(rows, 1, layer.tp_q_head_num, layer.head_dim)
    block_tables = metadata.block_kv_indices[:bs].repeat_interleave(tokens_per_req, dim=0)
    row_lens = get_dcp_chain_spec_lens(
        metadata.global_seq_lens_k[:bs],
        tokens_per_req,
        parallel.dcp_size,
        parallel.dcp_rank,
    )
    raw_out, lse = backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=row_lens,
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
        return_lse=True,
    )
    return raw_out.view(rows, -1), lse.view(rows, -1)
