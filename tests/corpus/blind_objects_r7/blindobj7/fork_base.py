# SPDX-License-Identifier: Apache-2.0
"""Speculator bases of the fork.

The fork predates the upstream consolidation of draft metadata into
``DraftModelSpeculator``; its drafters still derive from these bases, which
each own their family's shared metadata helpers.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from vllm.config import VllmConfig, get_layers_from_vllm_config
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata, init_attn_backend
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator
from vllm.v1.worker.utils import AttentionGroup

from ._metadata_utils import draft_seq_lens_upper_bound, uniform_query_start_loc

logger = init_logger(__name__)


class ForkSpeculatorCore(BaseSpeculator):
    """Buffers and attention wiring every fork drafter shares."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self.vllm_config = vllm_config
        self.device = device
        assert vllm_config.speculative_config is not None
        self.speculative_config = vllm_config.speculative_config
        self.num_speculative_steps = self.speculative_config.num_speculative_tokens
        self.draft_model_config = self.speculative_config.draft_model_config

        scheduler_config = vllm_config.scheduler_config
        self.max_num_reqs = scheduler_config.max_num_seqs
        self.max_num_tokens = scheduler_config.max_num_batched_tokens
        self.draft_max_seq_len = self.max_model_len

        parallel_config = vllm_config.parallel_config
        self.dp_size = parallel_config.data_parallel_size
        self.dp_rank = parallel_config.data_parallel_rank
        self.dcp_size = parallel_config.decode_context_parallel_size

        self.input_buffers = InputBuffers(
            max_num_reqs=self.max_num_reqs,
            max_num_tokens=self.max_num_tokens,
            device=device,
        )
        self.idx_mapping = torch.zeros(
            self.max_num_reqs, dtype=torch.int64, device=device
        )
        self.draft_tokens = torch.zeros(
            self.max_num_reqs,
            self.num_speculative_steps,
            dtype=torch.int64,
            device=device,
        )
        self.arange_np = np.arange(self.max_num_reqs + 1, dtype=np.int32)
        self.draft_is_prefilling = torch.zeros(self.max_num_reqs, dtype=torch.bool)
        self.draft_attn_layer_names: set[str] = set()

    @property
    def max_model_len(self) -> int:
        return self.vllm_config.model_config.max_model_len

    def load_draft_model(
        self, target_model: nn.Module, target_attn_layer_names: set[str]
    ) -> nn.Module:
        raise NotImplementedError

    def load_model(self, target_model: nn.Module) -> None:
        target_attn_layer_names = set(
            get_layers_from_vllm_config(
                self.vllm_config,
                AttentionLayerBase,  # type: ignore[type-abstract]
            ).keys()
        )
        self.model = self.load_draft_model(target_model, target_attn_layer_names)
        all_attn_layers = get_layers_from_vllm_config(
            self.vllm_config,
            AttentionLayerBase,  # type: ignore[type-abstract]
        )
        self.draft_attn_layer_names = set(all_attn_layers) - target_attn_layer_names
        for layer_name in self.draft_attn_layer_names:
            all_attn_layers[layer_name].is_draft_layer = True

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

    def _draft_query_start_loc(
        self, num_reqs: int, num_reqs_padded: int, query_start_loc_np: np.ndarray
    ) -> tuple[torch.Tensor, int]:
        query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
            query_start_loc_np[: num_reqs + 1]
        )
        query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
        max_query_len = int(
            (query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max()
        )
        return query_start_loc_cpu, max_query_len


class ForkDraftSpeculatorBase(ForkSpeculatorCore):
    """0.28-style base: callers pass the padded request/token counts."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py (0.28 DraftModelSpeculator._build_draft_attn_metadata, per the DCP fix); legacy helper taking num_tokens_padded, DCP recompute when not handed in
    # expect: clean
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int | None = None,
        causal: bool | Mapping[int, bool] = False,
        query_start_loc_np: np.ndarray | None = None,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        if query_start_loc_np is None:
            assert num_query_per_req is not None
            query_start_loc_np = self.arange_np[: num_reqs + 1] * num_query_per_req
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        block_tables = [
            x[:num_reqs_padded] for x in self.block_tables.input_block_tables
        ]
        draft_seq_lens_cpu_upper_bound = draft_seq_lens_upper_bound(
            seq_lens_cpu_upper_bound,
            num_reqs,
            num_reqs_padded,
            step,
            self.max_model_len,
        )
        if dcp_local_seq_lens is None and self.block_tables.cp_size > 1:
            # Draft steps advance and rewind their own global lengths, so the
            # target's rank-local lengths are stale here.
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens

        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens_padded,
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
            max_seq_len=self.draft_max_seq_len,
            block_tables=block_tables,
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens_padded],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_cpu_upper_bound,
        )

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn reused inside a speculator base; extra non-helper base method that calls the sink for the draft prefill
    # expect: SG101
    def _build_prefill_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        query_start_loc_cpu = torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.draft_max_seq_len,
            block_tables=[
                x[:num_reqs] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
        )


class ChunkedDraftSpeculatorBase(ForkSpeculatorCore):
    """Base of the chunked drafters: a chunk of draft steps per target step."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; DCP recompute nested under a guard on the draft step, buffer reused otherwise
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
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            # The rank-local split is computed once per chunk, when the chunk
            # starts, and shared by the chunk's later steps.
            if step == 0:
                prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
            positions=self.input_buffers.positions[:num_tokens],
            is_prefilling=self.draft_is_prefilling[:num_reqs_padded],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; uniform layout from arange_np delegated to the base helper
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
        query_start_loc_np = self.arange_np[: num_reqs + 1] * num_query_per_req
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class CachedLensSpeculatorBase(ForkSpeculatorCore):
    """Base of drafters that share the target runner's DCP buffers."""

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
        # The target runner splits the lengths across DCP ranks every step;
        # keep a view instead of a second buffer.
        self._target_dcp_local_seq_lens: torch.Tensor | None = (
            target_input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; lengths default to a view stored on self by set_attn
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
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[-1])
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None:
            dcp_local_seq_lens = self._target_dcp_local_seq_lens
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; uniform helper that builds directly with the dispatched descriptor's count
    # expect: SG103
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
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        # A uniform batch fills the dispatched shape exactly, so its token
        # count is the descriptor's.
        num_tokens = batch_desc.num_tokens
        query_start_loc_cpu, max_query_len = uniform_query_start_loc(
            self.arange_np, num_reqs, num_reqs_padded, num_query_per_req
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
        )
