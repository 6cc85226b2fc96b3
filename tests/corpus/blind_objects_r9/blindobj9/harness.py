# SPDX-License-Identifier: Apache-2.0
"""Benchmark harness helpers for draft attention metadata (fork-local)."""
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState


def _qsl_cpu(query_start_loc_np: np.ndarray, num_reqs: int) -> torch.Tensor:
    return torch.from_numpy(query_start_loc_np[: num_reqs + 1])


def build_eager_metadata(
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    max_seq_len: int,
) -> dict[str, Any]:
    num_tokens = int(query_start_loc_np[num_reqs])
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=_qsl_cpu(query_start_loc_np, num_reqs),
        max_query_len=int(np.diff(query_start_loc_np[: num_reqs + 1]).max()),
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
    )


def refresh_local_lens(input_buffers, block_tables, num_reqs: int):
    return prepare_dcp_local_seq_lens(
        input_buffers.dcp_local_seq_lens,
        input_buffers.seq_lens,
        num_reqs,
        block_tables.cp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


# idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
# expect: SG103
def bench_draft_metadata(
    batch_desc: BatchExecutionDescriptor,
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    max_seq_len: int,
) -> dict[str, Any]:
    num_reqs_padded = batch_desc.num_reqs or num_reqs
    num_tokens = batch_desc.num_tokens
    qsl_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
    qsl_cpu[: num_reqs + 1] = _qsl_cpu(query_start_loc_np, num_reqs)
    qsl_cpu[num_reqs:] = qsl_cpu[num_reqs]
    # positional, as in the old harness
    return build_attn_metadata(
        attn_groups,
        num_reqs_padded,
        num_tokens,
        input_buffers.query_start_loc[: num_reqs_padded + 1],
        qsl_cpu,
        int((qsl_cpu[1:] - qsl_cpu[:-1]).max()),
        input_buffers.seq_lens[:num_reqs_padded],
        max_seq_len,
        [x[:num_reqs_padded] for x in block_tables.input_block_tables],
        block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config,
    )


# idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
# expect: clean
def bench_draft_metadata_fixed(
    batch_desc: BatchExecutionDescriptor,
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    max_seq_len: int,
) -> dict[str, Any]:
    num_reqs_padded = batch_desc.num_reqs or num_reqs
    num_tokens = (
        batch_desc.num_tokens
        if batch_desc.cg_mode == CUDAGraphMode.FULL
        else int(query_start_loc_np[num_reqs])
    )
    qsl_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
    qsl_cpu[: num_reqs + 1] = _qsl_cpu(query_start_loc_np, num_reqs)
    qsl_cpu[num_reqs:] = qsl_cpu[num_reqs]
    return build_attn_metadata(
        attn_groups,
        num_reqs_padded,
        num_tokens,
        input_buffers.query_start_loc[: num_reqs_padded + 1],
        qsl_cpu,
        int((qsl_cpu[1:] - qsl_cpu[:-1]).max()),
        input_buffers.seq_lens[:num_reqs_padded],
        max_seq_len,
        [x[:num_reqs_padded] for x in block_tables.input_block_tables],
        block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config,
    )


# idiom: vllm/v1/worker/gpu/dp_utils.py dispatch_cg_and_sync_dp (caller side, DP-synced counts)
# expect: SG103
def bench_dp_metadata(
    batch_desc: BatchExecutionDescriptor,
    batch_sync: DPSyncState | None,
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    max_seq_len: int,
) -> dict[str, Any]:
    try:
        # every rank runs the agreed shape
        num_tokens = int(batch_sync.num_tokens_across_dp.max().item())
    except AttributeError:
        num_tokens = int(query_start_loc_np[num_reqs])
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=_qsl_cpu(query_start_loc_np, num_reqs),
        max_query_len=int(np.diff(query_start_loc_np[: num_reqs + 1]).max()),
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
    )


# idiom: vllm/v1/worker/gpu/dp_utils.py dispatch_cg_and_sync_dp (caller side, DP-synced counts)
# expect: clean
def bench_dp_metadata_fixed(
    batch_desc: BatchExecutionDescriptor,
    batch_sync: DPSyncState | None,
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    max_seq_len: int,
) -> dict[str, Any]:
    num_tokens = int(query_start_loc_np[num_reqs])
    if batch_desc.cg_mode == CUDAGraphMode.FULL and batch_sync is not None:
        num_tokens = int(batch_sync.num_tokens_across_dp.max().item())
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=_qsl_cpu(query_start_loc_np, num_reqs),
        max_query_len=int(np.diff(query_start_loc_np[: num_reqs + 1]).max()),
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
    )


# idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture
# expect: SG103
def iter_capture_metadata(
    cg_mode: CUDAGraphMode,
    capture_sizes: list[int],
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    max_seq_len: int,
) -> Iterator[tuple[int, dict[str, Any]]]:
    for size in sorted(capture_sizes, reverse=True):
        qsl = torch.arange(size + 1, dtype=torch.int32)
        # warm PIECEWISE runners with the same sizes the FULL graphs use
        yield size, build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=size,
            num_tokens=size,
            query_start_loc_gpu=input_buffers.query_start_loc[: size + 1],
            query_start_loc_cpu=qsl,
            max_query_len=1,
            seq_lens=input_buffers.seq_lens[:size],
            max_seq_len=max_seq_len,
            block_tables=[x[:size] for x in block_tables.input_block_tables],
            slot_mappings=block_tables.slot_mappings[:, :size],
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=cg_mode != CUDAGraphMode.NONE,
        )


# idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture
# expect: clean
def iter_capture_metadata_full(
    cg_mode: CUDAGraphMode,
    capture_sizes: list[int],
    attn_groups,
    kv_cache_config,
    input_buffers,
    block_tables,
    max_seq_len: int,
) -> Iterator[tuple[int, dict[str, Any]]]:
    if cg_mode != CUDAGraphMode.FULL:
        return
    for size in sorted(capture_sizes, reverse=True):
        qsl = torch.arange(size + 1, dtype=torch.int32)
        yield size, build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=size,
            num_tokens=size,
            query_start_loc_gpu=input_buffers.query_start_loc[: size + 1],
            query_start_loc_cpu=qsl,
            max_query_len=1,
            seq_lens=input_buffers.seq_lens[:size],
            max_seq_len=max_seq_len,
            block_tables=[x[:size] for x in block_tables.input_block_tables],
            slot_mappings=block_tables.slot_mappings[:, :size],
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=True,
        )
