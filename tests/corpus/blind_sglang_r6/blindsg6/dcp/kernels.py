"""Direct flashinfer MLA decode launches used by the fork's DCP decode path."""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg6.dcp.lens import dcp_world

if is_flashinfer_available():
    import flashinfer


def _common_kwargs(backend, layer, kv_cache, block_tables, max_seq_len):
    return dict(
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


# expect: SG203
def dcp_decode_from_cpu_lens(backend, query, layer, kv_cache, block_tables, forward_batch):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        raise RuntimeError("dcp_decode_from_cpu_lens is the DCP-only path")
    bs = forward_batch.batch_size
    kernel_kwargs = _common_kwargs(
        backend, layer, kv_cache, block_tables, backend.max_context_len
    )
    kernel_kwargs["query"] = query
    # host mirror avoids a D2H sync per layer
    kernel_kwargs["seq_lens"] = forward_batch.seq_lens_cpu[:bs].to(
        query.device, torch.int32, non_blocking=True
    )
    kernel_kwargs["return_lse"] = True
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


# expect: clean
def dcp_decode_from_cpu_lens_sharded(backend, query, layer, kv_cache, block_tables, forward_batch):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        raise RuntimeError("dcp_decode_from_cpu_lens_sharded is the DCP-only path")
    bs = forward_batch.batch_size
    kernel_kwargs = _common_kwargs(
        backend, layer, kv_cache, block_tables, backend.max_context_len
    )
    kernel_kwargs["query"] = query
    local_cpu = get_dcp_lens(
        forward_batch.seq_lens_cpu[:bs], parallel.dcp_size, parallel.dcp_rank
    )
    kernel_kwargs["seq_lens"] = local_cpu.to(query.device, torch.int32, non_blocking=True)
    kernel_kwargs["return_lse"] = True
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


# expect: clean
def decode_without_dcp(backend, query, layer, kv_cache, block_tables, forward_batch):
    if get_parallel().dcp_size > 1:
        raise NotImplementedError("use dcp_decode_from_cpu_lens_sharded under DCP")
    kernel_kwargs = _common_kwargs(
        backend, layer, kv_cache, block_tables, backend.max_context_len
    )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        seq_lens=forward_batch.seq_lens.to(torch.int32),
        **kernel_kwargs,
    )


def _cute_dsl_dcp_launcher(backend, layer, kv_cache, block_tables, max_seq_len):
    cp_world, cp_rank = dcp_world()
    return functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=cp_world,
        cp_rank=cp_rank,
        return_lse=True,
        **_common_kwargs(backend, layer, kv_cache, block_tables, max_seq_len),
    )


# expect: SG203
def dcp_verify_multi_token(
    backend, q, layer, kv_cache, metadata, bs: int, draft_token_num: int
):
    launch = _cute_dsl_dcp_launcher(
        backend, layer, kv_cache, metadata.block_kv_indices, metadata.max_seq_len_k
    )
    # [bs * draft_token_num, H, D] -> [bs, draft_token_num, H, D]
    q4 = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    return launch(query=q4, seq_lens=metadata.seq_lens_k[:bs])


# expect: clean
def dcp_verify_multi_token_bounded(
    backend, q, layer, kv_cache, metadata, bs: int, draft_token_num: int
):
    launch = _cute_dsl_dcp_launcher(
        backend, layer, kv_cache, metadata.block_kv_indices, metadata.max_seq_len_k
    )
    q4 = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    return launch(
        query=q4,
        seq_lens=metadata.seq_lens_k[:bs],
        causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs].to(torch.int32),
    )


# expect: SG203
def dcp_decode_with_fallback(backend, query, layer, kv_cache, block_tables, seq_lens):
    parallel = get_parallel()
    assert parallel.dcp_enabled
    try:
        kv_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
    except ValueError:
        # bad interleave config: fall back to the scheduler's lengths
        kv_lens = seq_lens
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        seq_lens=kv_lens.to(torch.int32),
        return_lse=True,
        **_common_kwargs(backend, layer, kv_cache, block_tables, backend.max_context_len),
    )


# expect: clean
def dcp_decode_without_fallback(backend, query, layer, kv_cache, block_tables, seq_lens):
    parallel = get_parallel()
    assert parallel.dcp_enabled
    try:
        kv_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
    except ValueError as exc:
        raise RuntimeError("cannot shard KV lengths for DCP decode") from exc
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        seq_lens=kv_lens.to(torch.int32),
        return_lse=True,
        **_common_kwargs(backend, layer, kv_cache, block_tables, backend.max_context_len),
    )
