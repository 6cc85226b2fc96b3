# SPDX-License-Identifier: Apache-2.0
"""Eager attention-metadata builders used by the fork's drafters when the
shared speculator helper was too slow to land upstream."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.utils import AttentionGroup


def build_eager_draft_metadata(
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    num_reqs: int,
    query_start_loc_np: np.ndarray,
    max_seq_len: int,
    causal: bool | Mapping[int, bool] = True,
) -> dict[str, Any]:
    num_tokens = int(query_start_loc_np[num_reqs])
    query_start_loc_cpu = torch.from_numpy(query_start_loc_np[: num_reqs + 1])
    max_query_len = int(np.diff(query_start_loc_np[: num_reqs + 1]).max())
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=max_query_len,
        seq_lens=input_buffers.seq_lens[:num_reqs],
        max_seq_len=max_seq_len,
        block_tables=[x[:num_reqs] for x in block_tables.input_block_tables],
        slot_mappings=block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=kv_cache_config,
        causal=causal,
    )


class EagerMetadataMixin:
    """Adds an eager single-token decode metadata build to a drafter."""

    def _eager_decode_metadata(self, num_reqs: int) -> dict[str, Any]:
        query_start_loc_cpu = torch.arange(num_reqs + 1, dtype=torch.int32)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            kv_cache_config=self.kv_cache_config,
        )
