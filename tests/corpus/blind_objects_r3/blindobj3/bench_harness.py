# SPDX-License-Identifier: Apache-2.0
"""Micro-benchmark and probe utilities for draft attention metadata.

Nothing here is a drafter: these classes sit next to a runner or a
speculator and time or inspect what it builds.
"""

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from vllm.v1.worker.utils import AttentionGroup

logger = init_logger(__name__)


class DraftAttnBenchHarness:
    """Times eager attention-metadata builds for a set of attention groups."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        input_buffers: InputBuffers,
        max_model_len: int,
    ):
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.block_tables = block_tables
        self.input_buffers = input_buffers
        self.max_model_len = max_model_len
        self.timings_ms: list[float] = []

    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (runner-side caller)
    # expect: clean
    def build_eager(self, num_reqs: int, query_len: int) -> dict[str, Any]:
        num_tokens = num_reqs * query_len
        query_start_loc_np = np.arange(num_reqs + 1, dtype=np.int32) * query_len
        start = time.perf_counter()
        attn_metadata = build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            max_query_len=query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
        )
        self.timings_ms.append((time.perf_counter() - start) * 1e3)
        return attn_metadata


class UniformMetadataProbe:
    """Wraps a speculator to inspect its uniform draft metadata eagerly."""

    def __init__(self, speculator: DraftModelSpeculator):
        self._speculator = speculator
        self.seen: list[tuple[int, int]] = []

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata (external caller)
    # expect: clean
    def _build_uniform_attn_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        num_query_per_req: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        self.seen.append((num_reqs, step))
        # The probe never replays graphs: inspect the eager variant.
        eager_desc = replace(batch_desc, cg_mode=CUDAGraphMode.NONE)
        return self._speculator._build_uniform_attn_metadata(
            eager_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
        )


class TargetDCPLengths:
    """Target-runner side DCP split, for the benchmark's target batches."""

    def __init__(self, input_buffers: InputBuffers, block_tables: BlockTables):
        self.input_buffers = input_buffers
        self.block_tables = block_tables

    # idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture (DCP branch)
    # expect: clean
    def prepare(self, seq_lens: torch.Tensor, num_reqs: int) -> torch.Tensor | None:
        if self.block_tables.cp_size == 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            seq_lens,
            num_reqs,
            self.block_tables.cp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )
