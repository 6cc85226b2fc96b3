# SPDX-License-Identifier: Apache-2.0
"""Target-model metadata utilities, capture managers and benchmarks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import (
    AttentionState,
    BatchExecutionDescriptor,
    CudaGraphManager,
)
from vllm.v1.worker.gpu.dp_utils import DPSyncState
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.utils import AttentionGroup

logger = init_logger(__name__)


class TargetMetadataRebuilder:
    """Rebuilds the target model's attention metadata for a re-run of a batch
    (KV-connector recompute, logits re-scoring)."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
    ):
        self.vllm_config = vllm_config
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.input_buffers = input_buffers
        self.block_tables = block_tables
        self.max_model_len = vllm_config.model_config.max_model_len
        self.dcp_size = vllm_config.parallel_config.decode_context_parallel_size

    # idiom: vllm/v1/worker/gpu/model_runner.py GPUModelRunner.prepare_attn
    # expect: SG103
    def rebuild(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        block_tables: Sequence[torch.Tensor],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        num_reqs = batch_desc.num_reqs or input_batch.num_reqs
        num_tokens = batch_desc.num_tokens
        query_start_loc_cpu = torch.from_numpy(input_batch.query_start_loc_np)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
        )

    # idiom: vllm/v1/worker/gpu/model_runner.py GPUModelRunner.prepare_attn
    # expect: clean
    def rebuild_exact(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        block_tables: Sequence[torch.Tensor],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_reqs = batch_desc.num_reqs or input_batch.num_reqs
            num_tokens = batch_desc.num_tokens
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = int(input_batch.query_start_loc_np[num_reqs])
        query_start_loc_cpu = torch.from_numpy(input_batch.query_start_loc_np)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
        )

    # idiom: vllm/v1/worker/gpu/model_runner.py GPUModelRunner (dcp_local_seq_lens preparation)
    # expect: clean
    def refresh_dcp(self, input_batch: InputBatch) -> None:
        if self.dcp_size <= 1:
            return
        input_batch.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            input_batch.seq_lens,
            input_batch.num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
            num_reqs_padded=input_batch.num_reqs_after_padding,
        )


class MixedBatchMetadataPlanner:
    """Plans metadata for a target batch split into prefill and decode halves."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
    ):
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self._builders: dict[str, Callable[..., dict[str, Any]]] = {
            "decode": build_attn_metadata,
        }

    # idiom: vllm/v1/worker/gpu/ubatch_utils.py (per-microbatch metadata)
    # expect: SG103
    def plan_decode(
        self,
        decode_batch: InputBatch,
        descs: Mapping[str, BatchExecutionDescriptor],
        block_tables: Sequence[torch.Tensor],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        prefill_desc = descs["prefill"]
        decode_desc = descs["decode"]
        num_reqs = decode_batch.num_reqs
        if prefill_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = decode_desc.num_tokens
        else:
            num_tokens = decode_batch.num_tokens
        build = self._builders["decode"]
        return build(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=decode_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(decode_batch.query_start_loc_np),
            max_query_len=int(decode_batch.num_scheduled_tokens.max()),
            seq_lens=decode_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
        )

    # idiom: vllm/v1/worker/gpu/ubatch_utils.py (per-microbatch metadata)
    # expect: clean
    def plan_decode_checked(
        self,
        decode_batch: InputBatch,
        descs: Mapping[str, BatchExecutionDescriptor],
        block_tables: Sequence[torch.Tensor],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        decode_desc = descs["decode"]
        num_reqs = decode_batch.num_reqs
        if decode_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = decode_desc.num_tokens
        else:
            num_tokens = decode_batch.num_tokens
        build = self._builders["decode"]
        return build(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=decode_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(decode_batch.query_start_loc_np),
            max_query_len=int(decode_batch.num_scheduled_tokens.max()),
            seq_lens=decode_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
        )


class DraftCaptureManager(CudaGraphManager):
    """Capture manager for a parallel-drafting query pass that builds its own
    dummy attention metadata."""

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture
    # expect: clean
    def _capture_attn_state(
        self,
        desc: BatchExecutionDescriptor,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        causal: bool | Mapping[int, bool],
    ) -> AttentionState:
        num_tokens = desc.num_tokens
        num_reqs = desc.num_reqs or min(num_tokens, self.max_num_reqs)
        input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
        input_block_tables = block_tables.get_dummy_block_tables(num_reqs)
        slot_mappings = block_tables.get_dummy_slot_mappings(num_tokens)
        slot_mappings_by_layer = build_slot_mappings_by_layer(
            slot_mappings, kv_cache_config
        )
        if desc.cg_mode != CUDAGraphMode.FULL:
            return AttentionState(None, slot_mappings_by_layer)
        if block_tables.cp_size > 1:
            input_batch.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                input_buffers.dcp_local_seq_lens,
                input_batch.seq_lens,
                input_batch.num_reqs,
                block_tables.cp_size,
                block_tables.cp_rank,
                block_tables.cp_interleave,
                num_reqs_padded=input_batch.num_reqs_after_padding,
            )
        attn_metadata = build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
            max_query_len=num_tokens // num_reqs,
            seq_lens=input_batch.seq_lens,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            max_seq_len=max_model_len,
            block_tables=input_block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=True,
            causal=causal,
        )
        return AttentionState(attn_metadata, slot_mappings_by_layer)


class DPPaddedAttnBenchmark:
    """Micro-benchmark for attention metadata builds under data parallelism."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        max_model_len: int,
    ):
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.input_buffers = input_buffers
        self.block_tables = block_tables
        self.max_model_len = max_model_len
        self.results: dict[str, list[float]] = {}

    def _query_start_loc(self, num_reqs: int, query_len: int) -> np.ndarray:
        return np.arange(num_reqs + 1, dtype=np.int32) * query_len

    # idiom: vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding (consumer)
    # expect: SG103
    def run_once(
        self, num_reqs: int, query_len: int, dp_sync: DPSyncState
    ) -> dict[str, Any]:
        query_start_loc_np = self._query_start_loc(num_reqs, query_len)
        num_tokens = int(dp_sync.num_tokens_across_dp.max())
        self.input_buffers.query_start_loc[: num_reqs + 1].copy_(
            torch.from_numpy(query_start_loc_np)
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            max_query_len=query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=self.block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=self.block_tables.get_dummy_slot_mappings(num_tokens),
            kv_cache_config=self.kv_cache_config,
        )

    # idiom: vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding (consumer)
    # expect: clean
    def run_once_exact(
        self, num_reqs: int, query_len: int, dp_sync: DPSyncState
    ) -> dict[str, Any]:
        query_start_loc_np = self._query_start_loc(num_reqs, query_len)
        num_tokens = int(query_start_loc_np[-1])
        padded = int(dp_sync.num_tokens_across_dp.max())
        self.results.setdefault("dp_padding", []).append(float(padded - num_tokens))
        self.input_buffers.query_start_loc[: num_reqs + 1].copy_(
            torch.from_numpy(query_start_loc_np)
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            max_query_len=query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=self.block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=self.block_tables.get_dummy_slot_mappings(num_tokens),
            kv_cache_config=self.kv_cache_config,
        )

    # idiom: vllm/v1/worker/gpu/ubatch_utils.py (dcp_local_seq_lens per microbatch)
    # expect: clean
    def prepare_dcp(self, num_reqs: int, dcp_size: int) -> torch.Tensor | None:
        if dcp_size <= 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )
