# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Model states for platform runners that pad batches differently."""
from bisect import bisect_left
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states.default import DefaultModelState
from vllm.v1.worker.utils import AttentionGroup


def _attn_kwargs(
    input_batch: InputBatch,
    num_reqs: int,
    block_tables: tuple[torch.Tensor, ...],
    slot_mappings: torch.Tensor,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_seq_len: int,
) -> dict[str, Any]:
    return dict(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        ),
        max_query_len=int(input_batch.num_scheduled_tokens.max()),
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_seq_len,
        block_tables=block_tables,
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        positions=input_batch.positions,
    )


class PaddedModelState(DefaultModelState):
    """Model state for runners that always launch at the padded size."""

    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: Any = None,
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs_after_padding
        num_tokens = input_batch.num_tokens_after_padding
        kwargs = _attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            self.max_model_len,
        )
        return build_attn_metadata(
            num_tokens=num_tokens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            **kwargs,
        )


class GraphModelState(DefaultModelState):
    """Model state that treats every captured replay as padded."""

    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: Any = None,
    ) -> dict[str, Any]:
        if cudagraph_mode:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        kwargs = _attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            self.max_model_len,
        )
        return build_attn_metadata(
            num_tokens=num_tokens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            **kwargs,
        )


class FullOnlyModelState(DefaultModelState):
    """Model state that pads attention only for FULL replays."""

    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: Any = None,
    ) -> dict[str, Any]:
        is_full = cudagraph_mode == CUDAGraphMode.FULL
        num_reqs = (
            input_batch.num_reqs_after_padding if is_full else input_batch.num_reqs
        )
        num_tokens = (
            input_batch.num_tokens_after_padding if is_full else input_batch.num_tokens
        )
        kwargs = _attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            self.max_model_len,
        )
        kwargs["num_tokens"] = num_tokens
        return build_attn_metadata(
            for_cudagraph_capture=for_capture, ubatch_idx=ubatch_idx, **kwargs
        )


class DPAwareModelState(DefaultModelState):
    """Model state that sizes attention from the DP agreement."""

    def set_dp_sync_state(self, dp_sync_state: DPSyncState | None) -> None:
        self._dp_sync_state = dp_sync_state

    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: Any = None,
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        num_tokens = input_batch.num_tokens
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        elif self._dp_sync_state is not None:
            num_tokens = int(self._dp_sync_state.num_tokens_across_dp.max())
        kwargs = _attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            self.max_model_len,
        )
        return build_attn_metadata(
            num_tokens=num_tokens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            **kwargs,
        )


class BucketedModelState(DefaultModelState):
    """Model state that pads piecewise launches to the captured bucket."""

    def _bucket(self, num_tokens: int) -> int:
        sizes = sorted(self.vllm_config.compilation_config.cudagraph_capture_sizes)
        idx = bisect_left(sizes, num_tokens)
        return sizes[idx] if idx < len(sizes) else num_tokens

    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: Any = None,
    ) -> dict[str, Any]:
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        elif cudagraph_mode == CUDAGraphMode.PIECEWISE:
            num_reqs = input_batch.num_reqs
            num_tokens = self._bucket(input_batch.num_tokens)
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        kwargs = _attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            self.max_model_len,
        )
        return build_attn_metadata(
            num_tokens=num_tokens,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            **kwargs,
        )


class DescriptorAttnPlanner:
    """Builds attention metadata for a dispatched batch descriptor."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
    ) -> None:
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len

    # expect: clean
    def plan(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_reqs = batch_desc.num_reqs or input_batch.num_reqs
            num_tokens = batch_desc.num_tokens
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            num_tokens=num_tokens,
            **_attn_kwargs(
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                self.attn_groups,
                self.kv_cache_config,
                self.max_model_len,
            ),
        )

    # expect: SG103
    def plan_mixed(
        self,
        input_batch: InputBatch,
        prefill_desc: BatchExecutionDescriptor,
        batch_desc: BatchExecutionDescriptor,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        num_tokens = input_batch.num_tokens
        if prefill_desc.cg_mode == CUDAGraphMode.FULL:
            num_reqs = batch_desc.num_reqs or num_reqs
            num_tokens = batch_desc.num_tokens
        return build_attn_metadata(
            num_tokens=num_tokens,
            **_attn_kwargs(
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                self.attn_groups,
                self.kv_cache_config,
                self.max_model_len,
            ),
        )

    # expect: clean
    def plan_eager(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            raise ValueError("plan_eager() cannot build FULL cudagraph metadata")
        num_tokens = int(input_batch.query_start_loc_np[input_batch.num_reqs])
        return build_attn_metadata(
            num_tokens=num_tokens,
            **_attn_kwargs(
                input_batch,
                input_batch.num_reqs,
                block_tables,
                slot_mappings,
                self.attn_groups,
                self.kv_cache_config,
                self.max_model_len,
            ),
        )
