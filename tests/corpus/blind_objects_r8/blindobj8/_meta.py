# SPDX-License-Identifier: Apache-2.0
"""Attention-metadata utilities that do not depend on any speculator."""

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.utils import AttentionGroup


def uniform_query_start_loc(
    arange_np: np.ndarray, num_reqs: int, num_query_per_req: int
) -> np.ndarray:
    return arange_np[: num_reqs + 1] * num_query_per_req


def attn_token_count(
    batch_desc: BatchExecutionDescriptor, query_start_loc_np: np.ndarray
) -> int:
    """Token count attention must see for this batch.

    FULL graphs replay the padded shape; PIECEWISE and eager see real tokens.
    """
    if batch_desc.cg_mode == CUDAGraphMode.FULL:
        return batch_desc.num_tokens
    return int(query_start_loc_np[-1])


def pad_to_capture_size(num_tokens: int, capture_sizes: Sequence[int]) -> int:
    """Smallest captured size that fits ``num_tokens`` (SGLang _pad_to_bucket)."""
    assert capture_sizes and num_tokens <= capture_sizes[-1], (
        f"{num_tokens} exceeds the largest captured size"
    )
    return capture_sizes[bisect.bisect_left(capture_sizes, num_tokens)]


def build_step_metadata(
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    input_buffers: InputBuffers,
    input_block_tables: Sequence[torch.Tensor],
    slot_mappings: torch.Tensor,
    num_reqs: int,
    num_tokens: int,
    query_start_loc_cpu: torch.Tensor,
    max_query_len: int,
    max_seq_len: int,
    seq_lens_cpu_upper_bound: torch.Tensor | None = None,
    causal: bool | Mapping[int, bool] = True,
    dcp_local_seq_lens: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Build per-layer metadata over ``input_buffers`` for ``num_tokens``."""
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=max_query_len,
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in input_block_tables],
        slot_mappings=slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        dcp_local_seq_lens=dcp_local_seq_lens,
        causal=causal,
    )
