# SPDX-License-Identifier: Apache-2.0
"""Drafters that dispatch, bucket or align their draft batches before
handing them to the shared metadata helpers."""

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.utils.math_utils import cdiv, round_up
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.gemma4.speculator import Gemma4Speculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import (
    MultiModuleMTPSpeculator,
)
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)

from blindobj3.plans import DraftStepPlan

logger = init_logger(__name__)


class FusedRefreshEagleSpeculator(EagleSpeculator):
    """EAGLE whose eager fused decode mirrors the captured graph's shape."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
    # expect: SG103
    def _fused_multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]

        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            for groups in self.attn_groups:
                for group in groups:
                    group.map_to_kernel_block_table(
                        self.block_tables.input_block_tables[group.kv_cache_group_id]
                    )
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return

        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings = self.block_tables.compute_slot_mappings(
                idx_mapping, query_start_loc, positions, batch_desc.num_tokens
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            # Build in the captured graph's shape so the in-place refresh in
            # _generate_fused_drafts writes the same persistent buffers.
            graph_desc = BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.FULL,
                num_tokens=batch_desc.num_tokens,
                num_reqs=batch_desc.num_reqs,
                uniform_token_count=1,
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=graph_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
            )

        self._generate_fused_drafts(
            num_reqs,
            batch_desc.num_tokens,
            attn_metadata,
            slot_mappings_by_layer,
            num_tokens_across_dp,
            batch_desc.cg_mode,
            num_speculative_steps,
        )


class InPlaceRefreshDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: SG103
    def _query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        is_full_cudagraph = batch_desc.cg_mode == CUDAGraphMode.FULL
        if is_full_cudagraph and self.supports_decode_metadata_update:
            # Recorded in the graph; nothing to build.
            return None
        if self.supports_decode_metadata_update:
            # Builders that refresh in place expect the captured shape; use it
            # for eager steps as well.
            batch_desc = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class PaddedTailMultiModuleMTPSpeculator(MultiModuleMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose (draft_attn_metadata)
    # expect: SG103
    def _draft_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        query_start_loc_np = input_batch.query_start_loc_np[: num_reqs + 1].copy()
        # Let the last request own the graph padding so the tail of the slot
        # mapping stays inside a request.
        query_start_loc_np[num_reqs] = batch_desc.num_tokens
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )


class SlotPaddedMultiModuleMTPSpeculator(MultiModuleMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose (draft_attn_metadata)
    # expect: clean
    def _draft_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
    ) -> tuple[dict[str, Any] | None, dict[str, torch.Tensor]]:
        num_reqs = input_batch.num_reqs
        # Slot mappings cover the padded tokens (PAD slots past the batch);
        # attention metadata sees the real offsets.
        slot_mappings_tensor = self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc,
            self.input_buffers.positions,
            batch_desc.num_tokens,
        )
        slot_mappings = build_slot_mappings_by_layer(
            slot_mappings_tensor, self.kv_cache_config
        )
        draft_attn_metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )
        return draft_attn_metadata, slot_mappings


class BucketedDSparkSpeculator(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: SG103
    def _query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        # Build for the whole request bucket the dispatcher picked so padded
        # rows get well-formed (empty) query blocks.
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs_padded,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class GuardedDSparkSpeculator(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: clean
    def _query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        # Padded sample rows must not scatter into a live request.
        num_sample = num_reqs * self.num_speculative_steps
        num_sample_padded = num_reqs_padded * self.num_speculative_steps
        self.sample_idx_mapping[num_sample:num_sample_padded].fill_(-1)
        if (
            batch_desc.cg_mode == CUDAGraphMode.FULL
            and self.supports_decode_metadata_update
        ):
            return None
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class AlignedDecodeMTPSpeculator(MTPSpeculator):
    """MTP that keeps draft decode request counts lane-aligned."""

    _decode_req_alignment = 8

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        num_build_reqs = min(
            round_up(num_reqs, self._decode_req_alignment), self.max_num_reqs
        )

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_build_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                    num_speculative_steps=num_speculative_steps,
                )


class StepTracingMTPSpeculator(MTPSpeculator):
    """MTP that records which draft steps ran eagerly."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.eager_steps: list[int] = []

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self.eager_steps.append(step)
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                    num_speculative_steps=num_speculative_steps,
                )


class _PlannedQueryDFlashBase(DFlashSpeculator):
    """Splits DFlash's propose() into a planning and a building stage."""

    _step_plan: DraftStepPlan

    def _plan_query_step(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
    ) -> DraftStepPlan:
        self._step_plan = DraftStepPlan(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_query_per_req=self.num_query_per_req,
            num_tokens_across_dp=(
                batch_sync.num_tokens_across_dp if batch_sync is not None else None
            ),
        )
        return self._step_plan


class BucketPlanDFlashSpeculator(_PlannedQueryDFlashBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: SG103
    def _build_planned_metadata(
        self, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> dict[str, Any] | None:
        plan = self._step_plan
        return self._build_uniform_attn_metadata(
            batch_desc=plan.batch_desc,
            num_reqs=plan.num_reqs_padded,
            num_query_per_req=plan.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=plan.num_query_per_req,
            causal=self._group_causal,
        )


class LivePlanDFlashSpeculator(_PlannedQueryDFlashBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: clean
    def _build_planned_metadata(
        self, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> dict[str, Any] | None:
        plan = self._step_plan
        return self._build_uniform_attn_metadata(
            batch_desc=plan.batch_desc,
            num_reqs=plan.num_reqs,
            num_query_per_req=plan.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=plan.num_query_per_req,
            causal=self._group_causal,
        )


class SharedBucketEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (decode_batch_desc)
    # expect: SG103
    def _decode_metadata(
        self,
        num_reqs: int,
        prefill_batch_desc: BatchExecutionDescriptor,
        decode_batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        # A FULL prefill replay pads the request bucket; keep the decode on
        # the same bucket so the per-request buffers line up.
        if prefill_batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_build_reqs = prefill_batch_desc.num_reqs or num_reqs
        else:
            num_build_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=decode_batch_desc,
            num_reqs=num_build_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )


class DummyShrinkEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (dummy-run request shrink)
    # expect: clean
    def _decode_metadata(
        self,
        num_reqs: int,
        decode_batch_desc: BatchExecutionDescriptor,
        dp_sync_state: DPSyncState | None,
        dummy_run: bool,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        # Prefill must keep the target batch shape; only decode can shrink it.
        if dummy_run and dp_sync_state is not None:
            num_reqs = min(num_reqs, dp_sync_state.num_reqs)
        if (
            decode_batch_desc.cg_mode == CUDAGraphMode.FULL
            and self.supports_decode_metadata_update
        ):
            return None
        return self._build_uniform_attn_metadata(
            batch_desc=decode_batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )


class DPAlignedDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (_build_uniform_batch_dp_sync + build)
    # expect: SG103
    def _query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        build_kwargs: dict[str, Any] = dict(
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        if batch_sync is not None:
            # Every DP rank must agree on the request count it builds for.
            num_tokens_dp = int(batch_sync.num_tokens_across_dp.max())
            build_kwargs["num_reqs"] = cdiv(num_tokens_dp, self.num_query_per_req)
        else:
            build_kwargs["num_reqs"] = num_reqs
        return self._build_uniform_attn_metadata(**build_kwargs)


class EagerPaddedDescDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill (eager BatchExecutionDescriptor)
    # expect: clean
    def _query_metadata(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        # Eager query step. num_reqs=None: no request padding; the helper
        # takes the token count from the query offsets outside FULL graphs.
        batch_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE,
            num_tokens=num_tokens_padded,
            num_reqs=None,
            uniform_token_count=self.num_query_per_req,
        )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class PaddedPrefillStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill (prefill_attn_md)
    # expect: SG103
    def _prefill_metadata(
        self,
        input_batch: InputBatch,
        prefill_slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        expanded_starts = (
            input_batch.query_start_loc_np[:num_reqs] + self.arange_np[:num_reqs]
        )
        # Close the expanded offsets at the padded length so the expanded
        # buffers stay aligned with the target's padded batch.
        query_start_loc_np = np.append(
            expanded_starts, input_batch.num_tokens_after_padding + num_reqs
        )
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=int(query_start_loc_np[-1]),
                num_reqs=num_reqs,
            ),
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=prefill_slot_mappings,
        )


class ExpandedPrefillStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill (prefill_attn_md)
    # expect: clean
    def _prefill_metadata(
        self,
        input_batch: InputBatch,
        prefill_slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        expanded_starts = (
            input_batch.query_start_loc_np[:num_reqs] + self.arange_np[:num_reqs]
        )
        # One correction token per request on top of the target's tokens.
        total_expanded = input_batch.num_tokens + num_reqs
        query_start_loc_np = np.append(expanded_starts, total_expanded)
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=total_expanded,
                num_reqs=num_reqs,
            ),
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=prefill_slot_mappings,
        )


class LaneAlignedGemma4Speculator(Gemma4Speculator):
    """Gemma4 MTP keeping its decode request count a multiple of 4."""

    _req_lane = 4
    _live_num_reqs = 0

    @property
    def _decode_num_reqs(self) -> int:
        return min(round_up(self._live_num_reqs, self._req_lane), self.max_num_reqs)

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode (advance_draft_positions=False)
    # expect: SG103
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        self._live_num_reqs = num_reqs
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            # Positions are constant: build once on the first step.
            if not skip_attn and step == 1:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=self._decode_num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                    num_speculative_steps=num_speculative_steps,
                )
