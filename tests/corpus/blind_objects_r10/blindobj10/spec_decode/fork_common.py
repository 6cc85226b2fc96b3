# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Common state for the out-of-tree draft speculators.

The platform forks keep their own copy of the metadata helpers, so the
shared piece here only owns buffers and the inputs every helper needs.
"""
from bisect import bisect_left
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import init_attn_backend
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator
from vllm.v1.worker.utils import AttentionGroup


class ForkSpeculatorCommon(BaseSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.vllm_config = vllm_config
        self.device = device
        assert vllm_config.speculative_config is not None
        self.speculative_config = vllm_config.speculative_config
        self.num_speculative_steps = self.speculative_config.num_speculative_tokens
        scheduler_config = vllm_config.scheduler_config
        self.max_num_reqs = scheduler_config.max_num_seqs
        self.max_num_tokens = scheduler_config.max_num_batched_tokens
        self.max_model_len = vllm_config.model_config.max_model_len
        self.draft_max_seq_len = self.max_model_len
        self.dp_size = vllm_config.parallel_config.data_parallel_size
        self.dp_rank = vllm_config.parallel_config.data_parallel_rank
        self.dcp_size = vllm_config.parallel_config.decode_context_parallel_size
        self.input_buffers = InputBuffers(
            max_num_reqs=self.max_num_reqs,
            max_num_tokens=self.max_num_tokens,
            device=device,
        )
        self.arange_np = np.arange(self.max_num_reqs + 1, dtype=np.int32)
        self.draft_is_prefilling = torch.zeros(self.max_num_reqs, dtype=torch.bool)
        self.cudagraph_capture_sizes = sorted(
            vllm_config.compilation_config.cudagraph_capture_sizes or []
        )
        self.draft_attn_layer_names: set[str] = set()

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        self.cudagraph_mode = cudagraph_mode

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
        self.attn_groups, self.attn_cg_support, _ = init_attn_backend(
            kv_cache_config,
            self.vllm_config,
            self.device,
            active_layer_names=self.draft_attn_layer_names,
        )
        self.block_tables = block_tables
        self.target_input_buffers = target_input_buffers
        self.target_attn_groups = target_attn_groups

    def _padded_capture_size(self, num_tokens: int) -> int:
        idx = bisect_left(self.cudagraph_capture_sizes, num_tokens)
        if idx == len(self.cudagraph_capture_sizes):
            return num_tokens
        return self.cudagraph_capture_sizes[idx]

    def _query_inputs(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        query_start_loc_np: np.ndarray,
    ) -> tuple[torch.Tensor, int, list[torch.Tensor]]:
        query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
            query_start_loc_np[: num_reqs + 1]
        )
        query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
        max_query_len = int((query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max())
        block_tables = [
            x[:num_reqs_padded] for x in self.block_tables.input_block_tables
        ]
        return query_start_loc_cpu, max_query_len, block_tables

    def _seq_lens_upper_bound(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> torch.Tensor:
        upper_bound = torch.zeros(num_reqs_padded, dtype=torch.int32, device="cpu")
        torch.add(
            seq_lens_cpu_upper_bound[:num_reqs], step, out=upper_bound[:num_reqs]
        )
        upper_bound[:num_reqs].clamp_(max=self.max_model_len)
        return upper_bound

    def propose(
        self,
        input_batch: InputBatch,
        attn_metadata: dict[str, Any],
        slot_mappings: dict[str, torch.Tensor],
        last_hidden_states: torch.Tensor,
        aux_hidden_states: list[torch.Tensor] | None,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        last_sampled: torch.Tensor,
        next_prefill_tokens: torch.Tensor,
        temperature: torch.Tensor,
        seeds: torch.Tensor,
        dp_sync_state=None,
        dummy_run: bool = False,
        skip_attn_for_dummy_run: bool = False,
        mm_inputs=None,
        is_profile: bool = False,
        num_speculative_tokens: int | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError
