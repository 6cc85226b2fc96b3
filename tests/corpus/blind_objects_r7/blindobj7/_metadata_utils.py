# SPDX-License-Identifier: Apache-2.0
"""Small metadata utilities used by the fork's prototypes and tools."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.v1.worker.gpu.attn_utils import build_attn_metadata


def uniform_query_start_loc(
    arange_np: np.ndarray, num_reqs: int, num_reqs_padded: int, num_query_per_req: int
) -> tuple[torch.Tensor, int]:
    """CPU query_start_loc for a uniform layout; padded requests are empty."""
    query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
    query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
        arange_np[: num_reqs + 1] * num_query_per_req
    )
    query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
    return query_start_loc_cpu, num_query_per_req


def draft_seq_lens_upper_bound(
    seq_lens_cpu_upper_bound: torch.Tensor,
    num_reqs: int,
    num_reqs_padded: int,
    step: int,
    max_model_len: int,
) -> torch.Tensor:
    upper_bound = torch.zeros(num_reqs_padded, dtype=torch.int32, device="cpu")
    torch.add(seq_lens_cpu_upper_bound[:num_reqs], step, out=upper_bound[:num_reqs])
    upper_bound[:num_reqs].clamp_(max=max_model_len)
    return upper_bound


def build_draft_metadata(
    speculator: Any,
    num_reqs: int,
    num_reqs_padded: int,
    num_tokens: int,
    num_query_per_req: int,
    seq_lens_cpu_upper_bound: torch.Tensor,
    step: int,
    causal: bool | Mapping[int, bool] = True,
) -> dict[str, Any]:
    """Build uniform draft metadata from a drafter's own buffers."""
    query_start_loc_cpu, max_query_len = uniform_query_start_loc(
        speculator.arange_np, num_reqs, num_reqs_padded, num_query_per_req
    )
    input_buffers = speculator.input_buffers
    return build_attn_metadata(
        attn_groups=speculator.attn_groups,
        num_reqs=num_reqs_padded,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs_padded + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=max_query_len,
        seq_lens=input_buffers.seq_lens[:num_reqs_padded],
        max_seq_len=speculator.max_model_len,
        block_tables=[
            x[:num_reqs_padded] for x in speculator.block_tables.input_block_tables
        ],
        slot_mappings=speculator.block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=speculator.kv_cache_config,
        causal=causal,
        seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
            seq_lens_cpu_upper_bound,
            num_reqs,
            num_reqs_padded,
            step,
            speculator.max_model_len,
        ),
    )
