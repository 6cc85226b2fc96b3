# SPDX-License-Identifier: Apache-2.0
"""Model states, capture helpers and metadata factories of the fork's target
runner."""

import bisect
from typing import Any

import torch
import torch.nn as nn

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import (
    BatchExecutionDescriptor,
    CudaGraphManager,
)
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.mm.encoder_cache import EncoderCache
from vllm.v1.worker.gpu.model_states.default import DefaultModelState
from vllm.v1.worker.gpu.model_states.interface import ModelSpecificAttnMetadata
from vllm.v1.worker.utils import AttentionGroup


def _target_attn_kwargs(
    max_model_len: int,
    input_batch: InputBatch,
    num_reqs: int,
    block_tables: tuple[torch.Tensor, ...],
    slot_mappings: torch.Tensor,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    for_capture: bool,
    ubatch_idx: int,
    model_specific_attn_metadata: ModelSpecificAttnMetadata | None,
) -> dict[str, Any]:
    """Everything DefaultModelState.prepare_attn hands the builder except the
    request and token counts."""
    max_query_len = input_batch.max_query_len
    if max_query_len is None:
        max_query_len = input_batch.num_scheduled_tokens.max().item()
    seq_lens_cpu_upper_bound = input_batch.seq_lens_cpu_upper_bound
    max_seq_len = (
        max_model_len
        if for_capture
        else seq_lens_cpu_upper_bound[:num_reqs].max().item()
    )
    return dict(
        attn_groups=attn_groups,
        query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        ),
        max_query_len=max_query_len,
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_seq_len,
        block_tables=block_tables,
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        positions=input_batch.positions,
        is_prefilling=torch.from_numpy(input_batch.is_prefilling_np),
        for_cudagraph_capture=for_capture,
        rswa_prefix_lens=input_batch.prompt_lens,
        req_idx=input_batch.idx_mapping_np,
        ubatch_idx=ubatch_idx,
        fast_prefill=input_batch.fast_prefill,
        model_specific_attn_metadata=model_specific_attn_metadata,
    )


class WidePaddingModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; mode test written as "any CUDA graph" (!= NONE), builder kwargs from a dict helper
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
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if cudagraph_mode != CUDAGraphMode.NONE:
            # Graph replays use the padded sizes.
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            **_target_attn_kwargs(
                self.max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
                ubatch_idx,
                model_specific_attn_metadata,
            ),
        )


class ForkModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; identity test on CUDAGraphMode.FULL, builder kwargs from a dict helper
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
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if cudagraph_mode is CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            # PIECEWISE and eager attention run outside any graph.
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        common = _target_attn_kwargs(
            self.max_model_len,
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            for_capture,
            ubatch_idx,
            model_specific_attn_metadata,
        )
        return build_attn_metadata(num_reqs=num_reqs, num_tokens=num_tokens, **common)


class DPAwareModelState(DefaultModelState):
    def __init__(
        self,
        vllm_config: VllmConfig,
        model: nn.Module,
        encoder_cache: EncoderCache | None,
        device: torch.device,
    ):
        super().__init__(vllm_config, model, encoder_cache, device)
        self._num_tokens_across_dp: torch.Tensor | None = None

    def set_dp_padding(self, num_tokens_across_dp: torch.Tensor | None) -> None:
        """Called by the runner after the DP sync of every step."""
        self._num_tokens_across_dp = num_tokens_across_dp

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; DP-synced counts stored on self by another method, max() taken with walrus in the eager branch
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
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
            # Expert all-to-all wants DP-uniform token counts, eager too.
            if (across_dp := self._num_tokens_across_dp) is not None:
                num_tokens = max(num_tokens, int(across_dp.max()))
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            **_target_attn_kwargs(
                self.max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
                ubatch_idx,
                model_specific_attn_metadata,
            ),
        )


class CaptureSizeModelState(DefaultModelState):
    def __init__(
        self,
        vllm_config: VllmConfig,
        model: nn.Module,
        encoder_cache: EncoderCache | None,
        device: torch.device,
    ):
        super().__init__(vllm_config, model, encoder_cache, device)
        self._capture_sizes = sorted(
            vllm_config.compilation_config.cudagraph_capture_sizes or []
        )

    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; PIECEWISE count rounded up to a CUDA-graph capture size with bisect
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
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        num_tokens = input_batch.num_tokens
        if cudagraph_mode == CUDAGraphMode.FULL:
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        elif cudagraph_mode == CUDAGraphMode.PIECEWISE:
            # Piecewise graphs replay at a captured size.
            idx = bisect.bisect_left(self._capture_sizes, num_tokens)
            if idx < len(self._capture_sizes):
                num_tokens = self._capture_sizes[idx]
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            **_target_attn_kwargs(
                self.max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
                ubatch_idx,
                model_specific_attn_metadata,
            ),
        )


class HasFullModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; runtime mode tested with CUDAGraphMode.has_full_cudagraphs(), counts chosen by conditional expressions
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
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        # cudagraph_mode is a runtime mode (NONE, PIECEWISE or FULL) here.
        padded = cudagraph_mode.has_full_cudagraphs()
        num_reqs = (
            input_batch.num_reqs_after_padding if padded else input_batch.num_reqs
        )
        num_tokens = (
            input_batch.num_tokens_after_padding if padded else input_batch.num_tokens
        )
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            **_target_attn_kwargs(
                self.max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
                ubatch_idx,
                model_specific_attn_metadata,
            ),
        )


class MatchModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn; match statement on the runtime mode with a wildcard for eager/PIECEWISE
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
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        match cudagraph_mode:
            case CUDAGraphMode.FULL:
                num_reqs = input_batch.num_reqs_after_padding
                num_tokens = input_batch.num_tokens_after_padding
            case _:
                num_reqs = input_batch.num_reqs
                num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            **_target_attn_kwargs(
                self.max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
                ubatch_idx,
                model_specific_attn_metadata,
            ),
        )


class EncoderDcpModelState(DefaultModelState):
    # idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture (DCP branch) as a model-state method; target-side DCP preparation outside any speculator
    # expect: clean
    def prepare_dcp_lens(
        self,
        input_batch: InputBatch,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
    ) -> None:
        if block_tables.cp_size == 1:
            input_batch.dcp_local_seq_lens = None
            return
        input_batch.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_batch.seq_lens,
            input_batch.num_reqs,
            block_tables.cp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
            num_reqs_padded=input_batch.num_reqs_after_padding,
        )


class ForkDraftCudaGraphManager(CudaGraphManager):
    """Manager for the fork's standalone drafters, which capture FULL only."""

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture as a manager method; FULL-only capture build with for_cudagraph_capture=True
    # expect: clean
    def _prepare_capture_attn(
        self,
        desc: BatchExecutionDescriptor,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
    ) -> dict[str, Any] | None:
        if desc.cg_mode != CUDAGraphMode.FULL:
            return None
        num_tokens = desc.num_tokens
        num_reqs = desc.num_reqs or min(num_tokens, self.max_num_reqs)
        input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
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
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
            max_query_len=desc.uniform_token_count or num_tokens,
            seq_lens=input_batch.seq_lens,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            max_seq_len=max_model_len,
            block_tables=block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=block_tables.get_dummy_slot_mappings(num_tokens),
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=True,
        )


# idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn as a free function handed the batch descriptor; early return for NONE, fall-through for graph modes
# expect: SG103
def build_verify_attn_metadata(
    batch_desc: BatchExecutionDescriptor,
    input_batch: InputBatch,
    block_tables: tuple[torch.Tensor, ...],
    slot_mappings: torch.Tensor,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
) -> dict[str, Any]:
    if batch_desc.cg_mode == CUDAGraphMode.NONE:
        num_reqs = input_batch.num_reqs
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=input_batch.num_tokens,
            **_target_attn_kwargs(
                max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                False,
                0,
                None,
            ),
        )
    # Graph replays: describe the dispatched shape.
    num_reqs = batch_desc.num_reqs or input_batch.num_reqs
    return build_attn_metadata(
        num_reqs=num_reqs,
        num_tokens=batch_desc.num_tokens,
        **_target_attn_kwargs(
            max_model_len,
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            False,
            0,
            None,
        ),
    )


# idiom: vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn as a free function handed the batch descriptor; early return for FULL, fall-through with real counts
# expect: clean
def build_verify_attn_metadata_checked(
    batch_desc: BatchExecutionDescriptor,
    input_batch: InputBatch,
    block_tables: tuple[torch.Tensor, ...],
    slot_mappings: torch.Tensor,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
) -> dict[str, Any]:
    if batch_desc.cg_mode == CUDAGraphMode.FULL:
        num_reqs = batch_desc.num_reqs or input_batch.num_reqs
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=batch_desc.num_tokens,
            **_target_attn_kwargs(
                max_model_len,
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                False,
                0,
                None,
            ),
        )
    num_reqs = input_batch.num_reqs
    return build_attn_metadata(
        num_reqs=num_reqs,
        num_tokens=input_batch.num_tokens,
        **_target_attn_kwargs(
            max_model_len,
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            False,
            0,
            None,
        ),
    )


class EncoderMetadataFactory:
    """Builds bidirectional attention metadata for the fork's embedding
    runner; not a speculator."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
    ):
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len

    # idiom: vllm/v1/worker/gpu/model_states/encoder_only.py (prepare_attn) in a non-speculator class that happens to name its method _build_attn_metadata; FULL test via a local flag
    # expect: clean
    def _build_attn_metadata(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any]:
        full = cudagraph_mode == CUDAGraphMode.FULL
        num_reqs = input_batch.num_reqs_after_padding if full else input_batch.num_reqs
        num_tokens = (
            input_batch.num_tokens_after_padding if full else input_batch.num_tokens
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=False,
        )
