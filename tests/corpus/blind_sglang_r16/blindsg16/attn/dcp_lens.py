# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Length bookkeeping and thin launchers for DCP MLA decode.

Under decode context parallelism every rank holds an interleaved slice of each
request's KV; the helpers below carry the rank-local and the global lengths
side by side so launch sites can pick the one each kernel argument needs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.dcp import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
    from sglang.srt.layers.attention.trtllm_mla_backend import (
        TRTLLMMLABackend,
        TRTLLMMLADecodeMetadata,
    )
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


@dataclass
class DcpLens:
    local: torch.Tensor
    global_: torch.Tensor
    max_local: int


def local_max_seq_len(max_seq_len: int) -> int:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return max_seq_len
    local_max = max_seq_len // parallel.dcp_size + int(
        parallel.dcp_rank < max_seq_len % parallel.dcp_size
    )
    return max(local_max, 1)


def split_dcp_lens(seq_lens: torch.Tensor, max_seq_len: int) -> DcpLens:
    parallel = get_parallel()
    global_lens = seq_lens.to(torch.int32)
    if not parallel.dcp_enabled:
        return DcpLens(global_lens, global_lens, max_seq_len)
    local = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank).to(
        torch.int32
    )
    return DcpLens(local, global_lens, local_max_seq_len(max_seq_len))


def verify_kv_lens(
    seq_lens: torch.Tensor, num_draft_tokens: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(global, rank-local) key lengths of a verify window."""
    global_lens = (seq_lens + num_draft_tokens).to(torch.int32)
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return global_lens, global_lens
    local_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank)
    return global_lens, local_lens.to(torch.int32)


def make_cute_dsl_decode(
    backend: CuteDslMLABackend, layer: RadixAttention
) -> Callable[..., torch.Tensor]:
    return functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        backend="cute-dsl",
    )


# expect: clean
def launch_dcp_decode(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    lens: DcpLens,
    layer: RadixAttention,
):
    parallel = get_parallel()
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=lens.local,
        max_seq_len=lens.max_local,
        layer=layer,
        causal_seqs=lens.global_,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )


# expect: SG203
def launch_verify_window(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    num_draft_tokens: int,
    max_seq_len: int,
    layer: RadixAttention,
):
    parallel = get_parallel()
    local_lens, global_lens = verify_kv_lens(seq_lens, num_draft_tokens)
    bs = seq_lens.shape[0]
    q = query.view(bs, num_draft_tokens, layer.tp_q_head_num, layer.head_dim)
    return backend._run_decode_kernel(
        query=q,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=local_lens,
        max_seq_len=local_max_seq_len(max_seq_len + num_draft_tokens),
        layer=layer,
        causal_seqs=global_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )


# expect: clean
def launch_verify_span(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    num_draft_tokens: int,
    max_seq_len: int,
    layer: RadixAttention,
):
    parallel = get_parallel()
    global_lens, local_lens = verify_kv_lens(seq_lens, num_draft_tokens)
    bs = seq_lens.shape[0]
    q = query.view(bs, num_draft_tokens, layer.tp_q_head_num, layer.head_dim)
    return backend._run_decode_kernel(
        query=q,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=local_lens,
        max_seq_len=local_max_seq_len(max_seq_len + num_draft_tokens),
        layer=layer,
        causal_seqs=global_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )


# expect: SG203
def launch_decode_from_kwargs(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    seq_lens_i32 = forward_batch.seq_lens[:bs].to(torch.int32)
    kernel_kwargs = dict(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens_i32,
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )
    parallel = get_parallel()
    if parallel.dcp_enabled:
        kernel_kwargs.update(
            causal_seqs=seq_lens_i32,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
    return backend._run_decode_kernel(**kernel_kwargs)


# expect: clean
def launch_decode_kwargs_dcp(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    seq_lens_i32 = forward_batch.seq_lens[:bs].to(torch.int32)
    kernel_kwargs = dict(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens_i32,
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )
    parallel = get_parallel()
    if parallel.dcp_enabled:
        kernel_kwargs.update(
            seq_lens=backend._get_dcp_local_seq_lens(seq_lens_i32),
            causal_seqs=seq_lens_i32,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
    return backend._run_decode_kernel(**kernel_kwargs)


# expect: SG203
def decode_with_partial(
    backend: CuteDslMLABackend,
    layer: RadixAttention,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    max_seq_len: int,
):
    decode = make_cute_dsl_decode(backend, layer)
    parallel = get_parallel()
    seq_lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
    if not parallel.dcp_enabled:
        return decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
        )
    return decode(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=local_max_seq_len(max_seq_len),
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=seq_lens,
        return_lse=True,
    )


# expect: clean
def decode_via_partial(
    backend: CuteDslMLABackend,
    layer: RadixAttention,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    max_seq_len: int,
):
    decode = make_cute_dsl_decode(backend, layer)
    parallel = get_parallel()
    lens = split_dcp_lens(forward_batch.seq_lens[: forward_batch.batch_size], max_seq_len)
    if not parallel.dcp_enabled:
        return decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=lens.global_,
            max_seq_len=max_seq_len,
        )
    return decode(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=lens.local,
        max_seq_len=lens.max_local,
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=lens.global_,
        return_lse=True,
    )


# expect: SG203
def decode_rank_local(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    max_seq_len: int,
    layer: RadixAttention,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    global_lens = kv_lens.clone()
    local_lens = kv_lens.clone()
    update_local_kv_lens_for_dcp(local_lens)
    raw_out, lse = backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=kv_lens,
        max_seq_len=local_max_seq_len(max_seq_len),
        layer=layer,
        causal_seqs=global_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_lens, backend.q_indptr_decode[: bs + 1], 1)
    return output.flatten(1), lse


# expect: clean
def decode_rank_slice(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    max_seq_len: int,
    layer: RadixAttention,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    kv_lens = global_lens.clone()
    update_local_kv_lens_for_dcp(kv_lens)
    raw_out, lse = backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=kv_lens,
        max_seq_len=local_max_seq_len(max_seq_len),
        layer=layer,
        causal_seqs=global_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, kv_lens, backend.q_indptr_decode[: bs + 1], 1)
    return output.flatten(1), lse
