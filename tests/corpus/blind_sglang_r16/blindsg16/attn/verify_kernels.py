# Copyright 2023-2026 SGLang Team
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# ==============================================================================
"""Standalone MLA decode launchers for speculative steps (draft decode, verify).

These wrap ``flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla`` (or a
trtllm_mla backend's ``_run_decode_kernel`` hook) for callers that manage their
own metadata, e.g. the per-step draft decode of a multi-step draft backend.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import (
        TRTLLMMLABackend,
        TRTLLMMLADecodeMetadata,
    )
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

_ENABLE_PDL = is_arch_support_pdl()


@dataclass
class DecodeLaunchArgs:
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    return_lse: bool = False


def build_launch_args(
    metadata: TRTLLMMLADecodeMetadata, forward_batch: ForwardBatch
) -> DecodeLaunchArgs:
    bs = forward_batch.batch_size
    return DecodeLaunchArgs(
        block_tables=metadata.block_kv_indices[:bs],
        seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
        max_seq_len=metadata.max_seq_len_k,
    )


def _trtllm_gen_decode(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer: RadixAttention,
    **kwargs,
):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        enable_pdl=_ENABLE_PDL,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        **kwargs,
    )


# expect: SG203
def run_draft_step_decode_dcp(
    backend: TRTLLMMLABackend,
    step: int,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    step_lens = (forward_batch.seq_lens[:bs] + step + 1).to(torch.int32)
    if get_parallel().dcp_enabled:
        max_seq_len = backend._get_dcp_local_max_seq_len(
            metadata.max_seq_len_k + step + 1
        )
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=step_lens,
        max_seq_len=metadata.max_seq_len_k + step + 1,
        layer=layer,
    )


# expect: clean
def run_draft_step_decode(
    backend: TRTLLMMLABackend,
    step: int,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    step_lens = (forward_batch.seq_lens[:bs] + step + 1).to(torch.int32)
    if get_parallel().dcp_enabled:
        max_seq_len = backend._get_dcp_local_max_seq_len(
            metadata.max_seq_len_k + step + 1
        )
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=backend._get_dcp_local_seq_lens(step_lens),
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=step_lens,
        max_seq_len=metadata.max_seq_len_k + step + 1,
        layer=layer,
    )


# expect: SG203
def verify_dense(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    dcp = get_parallel().dcp_enabled
    if dcp:
        seq_lens = metadata.seq_lens_k
        max_seq_len = metadata.max_seq_len_k
    else:
        seq_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        max_seq_len = metadata.max_seq_len_k + draft_token_num
    out = _trtllm_gen_decode(
        backend, q, kv_cache, metadata.block_kv_indices, seq_lens, max_seq_len, layer,
        return_lse=dcp,
    )
    if dcp:
        raw_out, lse = out
        return raw_out.reshape(bs * draft_token_num, -1), lse.reshape(
            bs * draft_token_num, -1
        )
    return out.reshape(bs * draft_token_num, -1)


# expect: SG203
def verify_ragged(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    layout = forward_batch.spec_info.ragged_verify_layout
    bs = forward_batch.batch_size
    q = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    parallel = get_parallel()
    global_lens = metadata.global_seq_lens_k[:bs]
    if parallel.dcp_enabled:
        seq_lens = get_dcp_lens(global_lens, parallel.dcp_size, parallel.dcp_rank)
    else:
        seq_lens = global_lens
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache,
        enable_pdl=_ENABLE_PDL,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=metadata.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        cum_seq_lens_q=layout.qo_indptr_device,
        max_q_len=int(layout.max_q_len),
        return_lse=parallel.dcp_enabled,
    )


# expect: clean
def decode_single_token(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    query = query.view(bs, 1, layer.tp_q_head_num, layer.head_dim)
    parallel = get_parallel()
    if parallel.dcp_enabled:
        local_lens = get_dcp_lens(
            forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        return _trtllm_gen_decode(
            backend,
            query,
            kv_cache,
            metadata.block_kv_indices,
            local_lens,
            backend._get_dcp_local_max_seq_len(metadata.max_seq_len_k),
            layer,
            return_lse=True,
        )
    return _trtllm_gen_decode(
        backend,
        query,
        kv_cache,
        metadata.block_kv_indices,
        forward_batch.seq_lens[:bs].to(torch.int32),
        metadata.max_seq_len_k,
        layer,
    )


# expect: SG203
def decode_bound_partial(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    launch = functools.partial(
        backend._run_decode_kernel,
        block_tables=metadata.block_kv_indices,
        seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )
    if get_parallel().dcp_enabled:
        raw_out, lse = launch(query=query, kv_cache=kv_cache, return_lse=True)
        return raw_out.flatten(1), lse
    return launch(query=query, kv_cache=kv_cache).flatten(1)


# expect: clean
def decode_partial_bound_lens(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    launch = functools.partial(
        backend._run_decode_kernel,
        block_tables=metadata.block_kv_indices,
        seq_lens=backend._get_dcp_local_seq_lens(
            forward_batch.seq_lens[:bs].to(torch.int32)
        ),
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
    )
    if get_parallel().dcp_enabled:
        raw_out, lse = launch(query=query, kv_cache=kv_cache, return_lse=True)
        return raw_out.flatten(1), lse
    return launch(query=query, kv_cache=kv_cache).flatten(1)


# expect: SG203
def decode_from_args(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    args = build_launch_args(metadata, forward_batch)
    if get_parallel().dcp_enabled:
        args.max_seq_len = backend._get_dcp_local_max_seq_len(args.max_seq_len)
        args.return_lse = True
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=args.block_tables,
        seq_lens=args.seq_lens,
        max_seq_len=args.max_seq_len,
        layer=layer,
        return_lse=args.return_lse,
    )


# expect: clean
def decode_from_launch_args(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: RadixAttention,
    forward_batch: ForwardBatch,
):
    args = build_launch_args(metadata, forward_batch)
    if get_parallel().dcp_enabled:
        args.seq_lens = backend._get_dcp_local_seq_lens(args.seq_lens)
        args.return_lse = True
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=args.block_tables,
        seq_lens=args.seq_lens,
        max_seq_len=args.max_seq_len,
        layer=layer,
        return_lse=args.return_lse,
    )


class DcpDraftDecodeRunner:
    """Per-step draft decode driven outside the multi-step draft backend."""

    def __init__(self, backend: TRTLLMMLABackend, num_steps: int):
        self.backend = backend
        self.num_steps = num_steps
        self._global_lens: Optional[torch.Tensor] = None
        self._local_lens: Optional[torch.Tensor] = None
        self._metadata: Optional[TRTLLMMLADecodeMetadata] = None

    def prepare(self, forward_batch: ForwardBatch) -> None:
        bs = forward_batch.batch_size
        self._metadata = forward_batch.decode_trtllm_mla_metadata
        self._global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._local_lens = self.backend._get_dcp_local_seq_lens(self._global_lens)

    # expect: SG203
    def launch_step(
        self, step: int, query: torch.Tensor, kv_cache: torch.Tensor, layer: RadixAttention
    ):
        metadata = self._metadata
        if get_parallel().dcp_enabled:
            raw_out, lse = self.backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=self._global_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return raw_out.flatten(1), lse
        return self.backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        ).flatten(1)

    # expect: clean
    def launch(
        self, step: int, query: torch.Tensor, kv_cache: torch.Tensor, layer: RadixAttention
    ):
        metadata = self._metadata
        if get_parallel().dcp_enabled:
            raw_out, lse = self.backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=self._local_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return raw_out.flatten(1), lse
        return self.backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        ).flatten(1)
