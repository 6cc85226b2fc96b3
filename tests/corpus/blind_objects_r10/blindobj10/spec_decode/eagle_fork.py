# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""EAGLE-style drafters maintained out of tree."""
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from vllm.v1.worker.utils import AttentionGroup

from blindobj10.spec_decode.draft_utils import build_uniform_draft_metadata

logger = init_logger(__name__)


# expect: clean
def prepare_draft_attn_to_capture(
    num_reqs: int,
    num_tokens: int,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
) -> dict[str, Any]:
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=num_tokens // num_reqs,
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_model_len,
        block_tables=block_tables.get_dummy_block_tables(num_reqs),
        slot_mappings=block_tables.get_dummy_slot_mappings(num_tokens),
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
    )


# expect: SG101
def build_draft_prefill_metadata(
    speculator: DraftModelSpeculator,
    input_batch: InputBatch,
) -> dict[str, Any]:
    num_reqs = input_batch.num_reqs
    num_tokens = input_batch.num_tokens
    return build_attn_metadata(
        attn_groups=speculator.attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        ),
        max_query_len=int(input_batch.num_scheduled_tokens.max()),
        seq_lens=input_batch.seq_lens,
        max_seq_len=speculator.max_model_len,
        block_tables=[
            x[:num_reqs] for x in speculator.block_tables.input_block_tables
        ],
        slot_mappings=speculator.block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=speculator.kv_cache_config,
    )


class EagleForkSpeculator(DraftModelSpeculator):
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
        self._step_metadata_fn = partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=kv_cache_config,
        )
        self._builders_by_group = {
            group.kv_cache_group_id: group.get_metadata_builder()
            for groups in self.attn_groups
            for group in groups
        }

    # expect: SG101
    def _prefill_metadata(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any]:
        num_tokens = int(input_batch.query_start_loc_np[num_reqs])
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[
                x[:num_reqs] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
        )

    # expect: SG101
    def _decode_metadata(self, num_reqs: int, step: int) -> dict[str, Any]:
        build = build_attn_metadata
        query_start_loc_np = self.arange_np[: num_reqs + 1]
        return build(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=min(self.draft_max_seq_len + step, self.max_model_len),
            block_tables=[
                x[:num_reqs] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            kv_cache_config=self.kv_cache_config,
        )

    # expect: SG101
    def _step_metadata(self, num_reqs: int) -> dict[str, Any]:
        return self._step_metadata_fn(
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1]),
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[
                x[:num_reqs] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
        )

    # expect: SG101
    def _refresh_group_metadata(self, num_reqs: int) -> dict[str, Any]:
        attn_metadata: dict[str, Any] = {}
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        for gid, builder in self._builders_by_group.items():
            common = CommonAttentionMetadata(
                query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
                query_start_loc_cpu=query_start_loc_cpu,
                seq_lens=self.input_buffers.seq_lens[:num_reqs],
                num_reqs=num_reqs,
                num_actual_tokens=num_reqs,
                max_query_len=1,
                max_seq_len=self.max_model_len,
                block_table_tensor=self.block_tables.input_block_tables[gid][
                    :num_reqs
                ],
                slot_mapping=self.block_tables.slot_mappings[gid, :num_reqs],
            )
            md = builder.build(common_prefix_len=0, common_attn_metadata=common)
            for layer_name in self.kv_cache_config.kv_cache_groups[gid].layer_names:
                attn_metadata[layer_name] = md
        return attn_metadata

    # expect: SG101
    def _uniform_metadata(self, num_reqs: int) -> dict[str, Any]:
        return build_uniform_draft_metadata(
            self.attn_groups,
            self.input_buffers,
            self.block_tables,
            self.kv_cache_config,
            num_reqs,
            self.num_query_per_req,
            self.max_model_len,
        )

    # expect: clean
    def _warmup_metadata(self, num_reqs: int) -> dict[str, Any]:
        num_tokens = num_reqs * self.num_query_per_req
        capture_kwargs = dict(
            kv_cache_config=self.kv_cache_config,
            for_cudagraph_capture=True,
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                self.arange_np[: num_reqs + 1] * self.num_query_per_req
            ),
            max_query_len=self.num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=self.block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=self.block_tables.get_dummy_slot_mappings(num_tokens),
            **capture_kwargs,
        )

    # expect: clean
    def _decode_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        step: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
        )


class ReplayingEagleSpeculator(DraftModelSpeculator):
    """Drafter that rebuilds metadata for the shape it will replay."""

    # expect: SG103
    def _draft_block(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        num_tokens = num_reqs * self.num_query_per_req
        batch_desc, _ = dispatch_cg_and_sync_dp(
            self.cudagraph_manager,
            num_reqs,
            num_tokens,
            uniform_token_count=self.num_query_per_req,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=dp_sync_state,
        )
        # Metadata is built for the padded shape so replays and eager runs share it.
        attn_desc = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
        return self._build_uniform_attn_metadata(
            batch_desc=attn_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
        )

    # expect: clean
    def _expanded_prefill(
        self,
        input_batch: InputBatch,
        total_expanded: int,
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        qsl_np = input_batch.query_start_loc_np[: num_reqs + 1]
        expanded_qsl_np = qsl_np + self.arange_np[: num_reqs + 1]
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=input_batch.num_tokens_after_padding,
                num_reqs=num_reqs,
            ),
            num_reqs=num_reqs,
            query_start_loc_np=np.asarray(expanded_qsl_np, dtype=np.int32),
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=slot_mappings,
        )

    def _slot_maps_by_layer(self, slot_mappings: torch.Tensor) -> Any:
        return build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config)

    def load_draft_model(self, target_model, target_attn_layer_names):
        return target_model

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        self.cudagraph_manager = None

    def capture(self) -> None:
        pass

    def propose(self, *args, **kwargs) -> torch.Tensor:
        raise NotImplementedError
