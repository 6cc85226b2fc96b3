# SPDX-License-Identifier: Apache-2.0
"""Model states with fork-local ``prepare_attn`` variants.

All of them follow ``model_states/default.py``: the runner hands
``prepare_attn`` this batch's CUDA-graph mode (``batch_desc.cg_mode``) and the
state picks the request/token counts the attention metadata is built with.
"""

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.utils.math_utils import round_up
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states.default import DefaultModelState
from vllm.v1.worker.gpu.model_states.interface import ModelSpecificAttnMetadata
from vllm.v1.worker.utils import AttentionGroup

from ._padding import FullGraphShape, StepShape


class _CommonKwargsMixin:
    """Everything but the counts, as ``DefaultModelState.prepare_attn`` does."""

    def _common_attn_kwargs(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool,
    ) -> dict[str, Any]:
        max_query_len = input_batch.max_query_len
        if max_query_len is None:
            max_query_len = int(input_batch.num_scheduled_tokens.max())
        upper = input_batch.seq_lens_cpu_upper_bound
        max_seq_len = (
            self.max_model_len if for_capture else int(upper[:num_reqs].max())
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
            seq_lens_cpu_upper_bound=upper,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
            is_prefilling=torch.from_numpy(input_batch.is_prefilling_np),
            for_cudagraph_capture=for_capture,
            req_idx=input_batch.idx_mapping_np,
        )


class PaddedPiecewiseModelState(_CommonKwargsMixin, DefaultModelState):
    """Pads PIECEWISE batches too: the fork's compiled FA3 wrapper wants the
    bucket size."""

    # idiom: DefaultModelState.prepare_attn's padded/unpadded choice (model_states/default.py), guarded by cudagraph_mode != NONE so PIECEWISE also takes num_tokens_after_padding
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
            num_reqs = input_batch.num_reqs_after_padding
            num_tokens = input_batch.num_tokens_after_padding
        else:
            num_reqs = input_batch.num_reqs
            num_tokens = input_batch.num_tokens
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **self._common_attn_kwargs(
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
            ),
        )


class ShapeHolderModelState(_CommonKwargsMixin, DefaultModelState):
    # idiom: DefaultModelState.prepare_attn with the count choice moved to a holder object (_padding.StepShape) whose cached_property pads for any graphed mode
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
        shape = StepShape(input_batch, cudagraph_mode)
        common = self._common_attn_kwargs(
            input_batch,
            shape.num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            for_capture,
        )
        return build_attn_metadata(
            num_reqs=shape.num_reqs,
            num_tokens=shape.num_tokens,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **common,
        )


class FullShapeModelState(_CommonKwargsMixin, DefaultModelState):
    # idiom: DefaultModelState.prepare_attn with the count choice on a holder object (_padding.FullGraphShape) that pads only when this batch's mode is FULL
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
        shape = FullGraphShape(input_batch, cudagraph_mode)
        common = self._common_attn_kwargs(
            input_batch,
            shape.num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            for_capture,
        )
        return build_attn_metadata(
            num_reqs=shape.num_reqs,
            num_tokens=shape.num_tokens,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **common,
        )


class BucketPadModelState(_CommonKwargsMixin, DefaultModelState):
    @cached_property
    def _pad_attn_to_bucket(self) -> bool:
        # Only worth it when FULL graphs are on at all.
        return self.vllm_config.compilation_config.cudagraph_mode.has_full_cudagraphs()

    # idiom: model_runner's max(num_tokens, batch_desc.num_tokens) padding, guarded by a cached_property over the compilation config (not this batch's mode) with a walrus on num_tokens_after_padding
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
        if (
            self._pad_attn_to_bucket
            and (padded := input_batch.num_tokens_after_padding) > num_tokens
        ):
            num_tokens = padded
            num_reqs = input_batch.num_reqs_after_padding
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **self._common_attn_kwargs(
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
            ),
        )


class MatchModeModelState(_CommonKwargsMixin, DefaultModelState):
    # idiom: DefaultModelState.prepare_attn's FULL-vs-other count choice written as a match statement on this batch's cudagraph_mode, tuple-unpacked
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
                num_reqs, num_tokens = (
                    input_batch.num_reqs_after_padding,
                    input_batch.num_tokens_after_padding,
                )
            case _:
                num_reqs, num_tokens = input_batch.num_reqs, input_batch.num_tokens
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **self._common_attn_kwargs(
                input_batch,
                num_reqs,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture,
            ),
        )


class FullOnlyPadModelState(_CommonKwargsMixin, DefaultModelState):
    # idiom: EncoderOnly/Mamba model states delegating to DefaultModelState.prepare_attn (super()) with an early return for every mode but FULL, then a FULL-only padded build
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
        if cudagraph_mode != CUDAGraphMode.FULL:
            return super().prepare_attn(
                input_batch,
                cudagraph_mode,
                block_tables,
                slot_mappings,
                attn_groups,
                kv_cache_config,
                for_capture=for_capture,
                ubatch_idx=ubatch_idx,
                model_specific_attn_metadata=model_specific_attn_metadata,
            )
        num_reqs = input_batch.num_reqs_after_padding
        common = self._common_attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            for_capture,
        )
        # FULL graphs read max_seq_len from capture; keep the worst case.
        common["max_seq_len"] = self.max_model_len
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=input_batch.num_tokens_after_padding,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **common,
        )


class PositionsPadModelState(_CommonKwargsMixin, DefaultModelState):
    block_align: int = 64

    # idiom: DefaultModelState.prepare_attn with the padded count (num_tokens_after_padding) used only for the positions view and a round_up'd max_seq_len; the sink gets the real token count in eager/PIECEWISE
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
        full = cudagraph_mode == CUDAGraphMode.FULL
        num_reqs = input_batch.num_reqs_after_padding if full else input_batch.num_reqs
        num_tokens = (
            input_batch.num_tokens_after_padding if full else input_batch.num_tokens
        )
        padded = input_batch.num_tokens_after_padding
        common = self._common_attn_kwargs(
            input_batch,
            num_reqs,
            block_tables,
            slot_mappings,
            attn_groups,
            kv_cache_config,
            for_capture,
        )
        common.update(
            positions=input_batch.positions[:padded],
            max_seq_len=min(
                round_up(common["max_seq_len"], self.block_align), self.max_model_len
            ),
        )
        return build_attn_metadata(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
            **common,
        )


@dataclass
class _UBatchView:
    batch: InputBatch
    block_tables: tuple[torch.Tensor, ...]
    slot_mappings: torch.Tensor


class MicrobatchAttnStager:
    """Per-microbatch metadata for DBO, as ``UBatchRunner.prepare`` stages it."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
    ):
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len

    # idiom: ubatch_utils.UBatchRunner.prepare building per-microbatch metadata while handed the step's BatchExecutionDescriptor; pads when num_ubatches > 1, which dp_utils also returns for an eager (NONE) microbatched descriptor
    # expect: SG103
    def stage(
        self,
        ubatches: list[_UBatchView],
        batch_desc: BatchExecutionDescriptor,
    ) -> list[dict[str, Any]]:
        padded = batch_desc.num_ubatches > 1 or batch_desc.cg_mode == CUDAGraphMode.FULL
        per_ubatch_tokens = batch_desc.num_tokens // batch_desc.num_ubatches
        staged = []
        for i, ub in enumerate(ubatches):
            batch = ub.batch
            num_tokens = per_ubatch_tokens if padded else batch.num_tokens
            staged.append(
                build_attn_metadata(
                    attn_groups=self.attn_groups,
                    num_reqs=batch.num_reqs,
                    num_tokens=num_tokens,
                    query_start_loc_gpu=batch.query_start_loc,
                    query_start_loc_cpu=torch.from_numpy(batch.query_start_loc_np),
                    max_query_len=int(batch.num_scheduled_tokens.max()),
                    seq_lens=batch.seq_lens,
                    max_seq_len=self.max_model_len,
                    block_tables=ub.block_tables,
                    slot_mappings=ub.slot_mappings,
                    kv_cache_config=self.kv_cache_config,
                    dcp_local_seq_lens=batch.dcp_local_seq_lens,
                    ubatch_idx=i,
                )
            )
        return staged


class FullOnlyMicrobatchStager(MicrobatchAttnStager):
    # idiom: ubatch_utils.UBatchRunner.prepare ("FULL uses padded sizes"): per-microbatch padded count only when the handed descriptor's cg_mode is FULL, a list comprehension of builds
    # expect: clean
    def stage(
        self,
        ubatches: list[_UBatchView],
        batch_desc: BatchExecutionDescriptor,
    ) -> list[dict[str, Any]]:
        full = batch_desc.cg_mode == CUDAGraphMode.FULL
        per_ubatch = batch_desc.num_tokens // batch_desc.num_ubatches
        return [
            build_attn_metadata(
                attn_groups=self.attn_groups,
                num_reqs=ub.batch.num_reqs,
                num_tokens=per_ubatch if full else ub.batch.num_tokens,
                query_start_loc_gpu=ub.batch.query_start_loc,
                query_start_loc_cpu=torch.from_numpy(ub.batch.query_start_loc_np),
                max_query_len=int(ub.batch.num_scheduled_tokens.max()),
                seq_lens=ub.batch.seq_lens,
                max_seq_len=self.max_model_len,
                block_tables=ub.block_tables,
                slot_mappings=ub.slot_mappings,
                kv_cache_config=self.kv_cache_config,
                dcp_local_seq_lens=ub.batch.dcp_local_seq_lens,
                ubatch_idx=i,
            )
            for i, ub in enumerate(ubatches)
        ]


class DcpMicrobatchSlicer:
    """Target-side microbatch slicer (not a drafter): each microbatch owns a
    rank-local length buffer, as ``ubatch_utils._slice_input_batch`` does."""

    def __init__(self, dcp_size: int, dcp_rank: int, cp_interleave: int, bufs):
        self.dcp_size = dcp_size
        self.dcp_rank = dcp_rank
        self.cp_interleave = cp_interleave
        self.ubatch_dcp_local_seq_lens = bufs

    # idiom: ubatch_utils._slice_input_batch: the target runner's per-microbatch prepare_dcp_local_seq_lens into its own buffer (runner code, not a speculator)
    # expect: clean
    def slice_dcp(self, ubatch: InputBatch, i: int) -> InputBatch:
        if self.dcp_size > 1:
            ubatch.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.ubatch_dcp_local_seq_lens[i],
                ubatch.seq_lens,
                ubatch.num_reqs,
                self.dcp_size,
                self.dcp_rank,
                self.cp_interleave,
                num_reqs_padded=ubatch.num_reqs_after_padding,
            )
        return ubatch
