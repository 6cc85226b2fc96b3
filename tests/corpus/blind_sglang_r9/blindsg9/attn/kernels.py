"""Direct launches of flashinfer's MLA decode kernel used by the fork's
backends (bypasses the TRTLLMMLABackend hook when the fork needs extra
kernel options)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg9.common.dcp_lens import as_kernel_lens, rank_local_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _base_kwargs(backend: TRTLLMMLABackend, query, kv_cache, block_tables, layer):
    return dict(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


# expect: SG203
def launch_dcp_decode_from_kwargs(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: "RadixAttention",
):
    kwargs = _base_kwargs(backend, query, kv_cache, metadata.block_kv_indices, layer)
    kwargs["max_seq_len"] = metadata.max_seq_len_k
    kwargs["backend"] = "cute-dsl"
    parallel = get_parallel()
    if parallel.dcp_enabled:
        kwargs.update(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=as_kernel_lens(metadata.global_seq_lens_k),
            return_lse=True,
        )
    kwargs["seq_lens"] = as_kernel_lens(metadata.global_seq_lens_k)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


# expect: clean
def launch_dcp_decode_from_kwargs_local(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: "RadixAttention",
):
    kwargs = _base_kwargs(backend, query, kv_cache, metadata.block_kv_indices, layer)
    kwargs["max_seq_len"] = metadata.max_seq_len_k
    kwargs["backend"] = "cute-dsl"
    parallel = get_parallel()
    if parallel.dcp_enabled:
        kwargs.update(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=as_kernel_lens(metadata.global_seq_lens_k),
            return_lse=True,
        )
    # rank_local_lens is the identity without DCP.
    kwargs["seq_lens"] = rank_local_lens(metadata.global_seq_lens_k)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


def make_cute_dsl_dcp_launcher(backend: TRTLLMMLABackend):
    parallel = get_parallel()
    return functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        backend="cute-dsl",
        enable_dcp=parallel.dcp_enabled,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )


# expect: SG203
def launch_with_partial(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
    max_seq_len: int,
):
    launcher = make_cute_dsl_dcp_launcher(backend)
    global_lens = as_kernel_lens(forward_batch.seq_lens[: forward_batch.batch_size])
    return launcher(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=global_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        causal_seqlens_kv_global=global_lens,
    )


# expect: clean
def launch_with_partial_local(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
    max_seq_len: int,
):
    launcher = make_cute_dsl_dcp_launcher(backend)
    parallel = get_parallel()
    global_lens = as_kernel_lens(forward_batch.seq_lens[: forward_batch.batch_size])
    local_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank)
    return launcher(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=as_kernel_lens(local_lens),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        causal_seqlens_kv_global=global_lens,
    )


# expect: clean
def launch_mla_decode_single_rank(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
    max_seq_len: int,
):
    """Plain trtllm-gen decode; this path has no DCP support."""
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "launch_mla_decode_single_rank does not support decode context "
            "parallelism; use the cutedsl_mla backend"
        )
    kwargs = _base_kwargs(backend, query, kv_cache, block_tables, layer)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        seq_lens=as_kernel_lens(forward_batch.seq_lens),
        max_seq_len=max_seq_len,
        **kwargs,
    )


# expect: clean
def launch_mla_decode_any(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
    max_seq_len: int,
):
    kwargs = _base_kwargs(backend, query, kv_cache, block_tables, layer)
    parallel = get_parallel()
    global_lens = as_kernel_lens(forward_batch.seq_lens[: forward_batch.batch_size])
    if not parallel.dcp_enabled:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            seq_lens=global_lens, max_seq_len=max_seq_len, **kwargs
        )
    local_lens = backend._get_dcp_local_seq_lens(global_lens)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        seq_lens=local_lens,
        max_seq_len=backend._get_dcp_local_max_seq_len(max_seq_len),
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=global_lens,
        return_lse=True,
        **kwargs,
    )


# expect: SG203
def launch_mla_decode_maybe_local(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
    max_seq_len: int,
    local_seq_lens: Optional[torch.Tensor] = None,
):
    """Callers that already hold rank-local lengths pass them in."""
    kwargs = _base_kwargs(backend, query, kv_cache, block_tables, layer)
    parallel = get_parallel()
    seq_lens = (
        local_seq_lens
        if local_seq_lens is not None
        else as_kernel_lens(forward_batch.seq_lens)
    )
    extra = {}
    if parallel.dcp_enabled:
        extra = dict(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=as_kernel_lens(forward_batch.seq_lens),
            return_lse=True,
        )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        seq_lens=seq_lens, max_seq_len=max_seq_len, **kwargs, **extra
    )
