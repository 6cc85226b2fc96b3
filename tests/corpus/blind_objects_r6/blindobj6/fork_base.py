# SPDX-License-Identifier: Apache-2.0
"""Fork-local speculator bases for "lookahead head" drafters.

A lookahead head is a couple of attention layers bolted onto the target model:
no separate draft model, and the head shares the target runner's input
buffers. These bases predate upstream's ``DraftModelSpeculator`` helpers, so
each carries its own shared metadata helper that every subclass builds
through. ``LookaheadHeadSpeculatorBase`` is the original (still used by the
v1 heads); ``LookaheadHeadSpeculatorBaseV2`` is the rewrite that follows
upstream's DCP fix.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata, init_attn_backend
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator
from vllm.v1.worker.utils import AttentionGroup


class _LookaheadHeadCommon(BaseSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.vllm_config = vllm_config
        self.device = device
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        self.dcp_size = vllm_config.parallel_config.decode_context_parallel_size
        self.arange_np = np.arange(self.max_num_reqs + 1, dtype=np.int32)
        self.head_layer_names: set[str] = set()

    @property
    def max_model_len(self) -> int:
        return self.vllm_config.model_config.max_model_len

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        # Lookahead heads run inside the target's graphs.
        pass

    def capture(self) -> None:
        pass

    def set_attn(
        self,
        model_state: ModelState,
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        target_input_buffers: InputBuffers,
        target_attn_groups: list[list[AttentionGroup]],
    ) -> None:
        self.model_state = model_state
        self.kv_cache_config = kv_cache_config
        self.block_tables = block_tables
        # The head reads the target's positions/seq_lens in place.
        self.input_buffers = target_input_buffers
        self.attn_groups, self.attn_cg_support, _ = init_attn_backend(
            kv_cache_config,
            self.vllm_config,
            self.device,
            active_layer_names=self.head_layer_names,
        )

    def _upper_bound(
        self, num_reqs: int, num_reqs_padded: int, seq_lens_cpu_upper_bound, step
    ) -> torch.Tensor:
        upper = torch.zeros(num_reqs_padded, dtype=torch.int32, device="cpu")
        torch.add(seq_lens_cpu_upper_bound[:num_reqs], step, out=upper[:num_reqs])
        upper[:num_reqs].clamp_(max=self.max_model_len)
        return upper


class LookaheadHeadSpeculatorBase(_LookaheadHeadCommon):
    # idiom: DraftModelSpeculator._build_attn_metadata (speculator.py) as copied into a fork speculator base before the DSpark+DCP fix: without caller lengths it hands the sink the (target-prepared) dcp_local_seq_lens buffer, no recompute
    # expect: SG105
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
            query_start_loc_np[: num_reqs + 1]
        )
        query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
        max_query_len = int((query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max())
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            # The target runner prepared these for this step.
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs_padded] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=self._upper_bound(
                num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
            ),
        )


class LookaheadHeadSpeculatorBaseV2(_LookaheadHeadCommon):
    def set_attn(
        self,
        model_state: ModelState,
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        target_input_buffers: InputBuffers,
        target_attn_groups: list[list[AttentionGroup]],
    ) -> None:
        super().set_attn(
            model_state,
            kv_cache_config,
            block_tables,
            target_input_buffers,
            target_attn_groups,
        )
        # The head advances its own seq_lens, so it owns a local-lens buffer.
        self.head_dcp_local_seq_lens = torch.zeros(
            self.max_num_reqs, dtype=torch.int32, device=self.device
        )

    # idiom: DraftModelSpeculator._build_attn_metadata after the DSpark+DCP fix: without caller lengths it recomputes them with prepare_dcp_local_seq_lens from the current seq_lens right before the sink
    # expect: clean
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
            query_start_loc_np[: num_reqs + 1]
        )
        query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
        max_query_len = int((query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max())
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.head_dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs_padded] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=self._upper_bound(
                num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
            ),
        )
