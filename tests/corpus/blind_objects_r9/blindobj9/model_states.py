# SPDX-License-Identifier: Apache-2.0
"""Fork model states that build target attention metadata."""
from contextlib import contextmanager
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states.default import DefaultModelState
from vllm.v1.worker.utils import AttentionGroup


class StickyPaddingModelState(DefaultModelState):
    def prepare_inputs(self, input_batch: InputBatch, *args, **kwargs):
        # remember the DP/graph padded count for the attention build
        self._num_tokens_for_attn = input_batch.num_tokens_after_padding
        self._num_reqs_for_attn = input_batch.num_reqs_after_padding
        return super().prepare_inputs(input_batch, *args, **kwargs)

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
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
        model_specific_attn_metadata=None,
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        num_tokens = self._num_tokens_for_attn
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=input_batch.num_scheduled_tokens.max().item(),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class GraphAwareModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    # expect: SG103
    def prepare_attn(
        self,
        input_batch,
        cudagraph_mode,
        block_tables,
        slot_mappings,
        attn_groups,
        kv_cache_config,
        for_capture=False,
        ubatch_idx=0,
        model_specific_attn_metadata=None,
    ):
        if cudagraph_mode != CUDAGraphMode.NONE:
            # any captured graph replays the padded batch
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=input_batch.num_scheduled_tokens.max().item(),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class GraphAwareModelStateFixed(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    # expect: clean
    def prepare_attn(
        self,
        input_batch,
        cudagraph_mode,
        block_tables,
        slot_mappings,
        attn_groups,
        kv_cache_config,
        for_capture=False,
        ubatch_idx=0,
        model_specific_attn_metadata=None,
    ):
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=input_batch.num_scheduled_tokens.max().item(),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )


class KwargsModelState(DefaultModelState):
    def _common_kwargs(self, input_batch: InputBatch, num_reqs: int) -> dict[str, Any]:
        return dict(
            num_reqs=num_reqs,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=input_batch.num_scheduled_tokens.max().item(),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
        )

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
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
        model_specific_attn_metadata=None,
    ) -> dict[str, Any]:
        kwargs = self._common_kwargs(input_batch, input_batch.num_reqs)
        kwargs["num_tokens"] = input_batch.num_tokens_after_padding
        if cudagraph_mode == CUDAGraphMode.FULL:
            kwargs.update(self._common_kwargs(input_batch, input_batch.num_reqs_after_padding))
        kwargs.update(
            attn_groups=attn_groups,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )
        return build_attn_metadata(**kwargs)


class KwargsModelStateFixed(KwargsModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
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
        model_specific_attn_metadata=None,
    ) -> dict[str, Any]:
        kwargs = self._common_kwargs(input_batch, input_batch.num_reqs)
        kwargs["num_tokens"] = input_batch.num_tokens
        if cudagraph_mode == CUDAGraphMode.FULL:
            kwargs.update(self._common_kwargs(input_batch, input_batch.num_reqs_after_padding))
            kwargs["num_tokens"] = input_batch.num_tokens_after_padding
        kwargs.update(
            attn_groups=attn_groups,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
        )
        return build_attn_metadata(**kwargs)


class ScopedModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    # expect: SG103
    @contextmanager
    def eager_attn_scope(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
    ):
        if cudagraph_mode == CUDAGraphMode.FULL:
            yield None
            return
        num_reqs = input_batch.num_reqs
        metadata = build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=input_batch.num_tokens_after_padding,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=input_batch.num_scheduled_tokens.max().item(),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
        )
        try:
            yield metadata
        finally:
            metadata.clear()

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    # expect: clean
    @contextmanager
    def eager_attn_scope_fixed(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
    ):
        if cudagraph_mode == CUDAGraphMode.FULL:
            yield None
            return
        num_reqs = input_batch.num_reqs
        metadata = build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=input_batch.num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=input_batch.num_scheduled_tokens.max().item(),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
        )
        try:
            yield metadata
        finally:
            metadata.clear()
