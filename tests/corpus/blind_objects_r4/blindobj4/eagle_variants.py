# SPDX-License-Identifier: Apache-2.0
"""Eagle / MTP drafter variants carried in the fork."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.utils import AttentionGroup

from blindobj4._dcp import local_lens_view
from blindobj4._padding import (
    RequestPaddingPolicy,
    graph_request_count,
    iter_step_dcp_lens,
    iter_step_real_counts,
    iter_step_request_counts,
)
from blindobj4.base import StatefulEagleBase

logger = init_logger(__name__)


class BucketedEagleSpeculator(StatefulEagleBase):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.pad_policy = RequestPaddingPolicy(
            alignment=8, capacity=self.max_num_reqs
        )

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
        num_reqs_padded = self.pad_policy.pad(num_reqs)
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        query_start_loc_np = self.arange_np[: num_reqs_padded + 1]
        self._remember_decode_batch(batch_desc, num_reqs)

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping,
                    query_start_loc,
                    positions,
                    batch_desc.num_tokens,
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=query_start_loc_np,
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

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _multi_step_decode_compact(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        num_slots = max(self.pad_policy.pad(num_reqs), batch_desc.num_tokens)
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        query_start_loc_np = self.arange_np[: num_reqs + 1]

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, num_slots
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=query_start_loc_np,
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


class DescriptorTableEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (prefill/decode descriptors)
    # expect: SG103
    def _decode_metadata_from_table(
        self,
        descs: dict[str, BatchExecutionDescriptor],
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        prefill_desc = descs["prefill"]
        decode_desc = descs.get("decode", prefill_desc)
        if prefill_desc.cg_mode == CUDAGraphMode.FULL:
            md_num_reqs = decode_desc.num_reqs or num_reqs
        else:
            md_num_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=decode_desc,
            num_reqs=md_num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (prefill/decode descriptors)
    # expect: clean
    def _decode_metadata_from_table_checked(
        self,
        descs: dict[str, BatchExecutionDescriptor],
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        prefill_desc = descs["prefill"]
        decode_desc = descs.get("decode", prefill_desc)
        if decode_desc.cg_mode == CUDAGraphMode.FULL:
            md_num_reqs = decode_desc.num_reqs or num_reqs
        else:
            md_num_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=decode_desc,
            num_reqs=md_num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class PartialStepEagleSpeculator(EagleSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._step_md_fn: Callable[..., dict[str, Any] | None] | None = None

    def _arm_decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        self._step_md_fn = partial(
            self._build_uniform_attn_metadata,
            batch_desc=batch_desc,
            num_reqs=graph_request_count(batch_desc, num_reqs),
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )

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
        self._arm_decode_metadata(batch_desc, num_reqs, seq_lens_cpu_upper_bound)
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
                assert self._step_md_fn is not None
                attn_metadata = self._step_md_fn(step=step)
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


class PartialStepMTPSpeculator(MTPSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._step_md_fn: Callable[..., dict[str, Any] | None] | None = None

    def _arm_decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        self._step_md_fn = partial(
            self._build_uniform_attn_metadata,
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )

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
        self._arm_decode_metadata(batch_desc, num_reqs, seq_lens_cpu_upper_bound)
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
                assert self._step_md_fn is not None
                attn_metadata = self._step_md_fn(step=step)
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


class GeneratorStepEagleSpeculator(EagleSpeculator):
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step, step_reqs in iter_step_request_counts(
            batch_desc, num_reqs, num_speculative_steps
        ):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=step_reqs,
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


class GeneratorStepMTPSpeculator(MTPSpeculator):
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
        for step, step_reqs in iter_step_real_counts(num_reqs, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=step_reqs,
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


class DPAwareEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_batch_dp_sync
    # expect: SG103
    def _decode_metadata_for_sync(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if batch_sync is not None and not batch_sync.eager:
            # One query token per request during draft decode.
            md_num_reqs = int(batch_sync.num_tokens_across_dp.max())
        else:
            md_num_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=md_num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_batch_dp_sync
    # expect: clean
    def _decode_metadata_for_sync_checked(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        if batch_sync is not None and is_full:
            md_num_reqs = int(batch_sync.num_tokens_across_dp.max())
        else:
            md_num_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=md_num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class ManagerModeEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.init_cudagraph_manager
    # expect: SG103
    def _decode_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        manager = self.decode_cudagraph_manager
        graphs_enabled = (
            manager is not None
            and manager.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
        )
        md_num_reqs = (batch_desc.num_reqs or num_reqs) if graphs_enabled else num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=md_num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
    # expect: clean
    def _decode_metadata_by_batch_mode(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
        assert batch_desc.num_reqs is not None
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=batch_desc.num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class ReplaceDescEagleSpeculator(EagleSpeculator):
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
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return

        # The in-place metadata refresh needs the graph-shaped layout.
        md_desc = (
            replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
            if self.supports_decode_metadata_update
            else batch_desc
        )
        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings = self.block_tables.compute_slot_mappings(
                idx_mapping, query_start_loc, positions, batch_desc.num_tokens
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=md_desc,
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

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
    # expect: clean
    def _fused_multi_step_decode_bounded(
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
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return

        md_desc = (
            replace(batch_desc, max_query_len=1)
            if self.supports_decode_metadata_update
            else batch_desc
        )
        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings = self.block_tables.compute_slot_mappings(
                idx_mapping, query_start_loc, positions, batch_desc.num_tokens
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=md_desc,
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


class LoopDispatchEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (decode dispatch)
    # expect: SG103
    def _multi_step_decode_redispatch(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_tokens_across_dp: torch.Tensor | None,
        num_speculative_steps: int,
    ) -> None:
        assert self.decode_cudagraph_manager is not None
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        for step in range(1, num_speculative_steps):
            step_desc = self.decode_cudagraph_manager.dispatch(
                num_reqs, num_reqs, 1, num_active_loras=0
            )
            slot_mappings = self.block_tables.compute_slot_mappings(
                idx_mapping, query_start_loc, positions, step_desc.num_tokens
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=step_desc.num_reqs or num_reqs,
                batch_desc=step_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
            self.current_draft_step.fill_(step)
            if step_desc.cg_mode == CUDAGraphMode.FULL:
                self.decode_cudagraph_manager.run_fullgraph(step_desc)
                continue
            self._generate_draft(
                num_reqs,
                step_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=step_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (decode dispatch)
    # expect: clean
    def _multi_step_decode_redispatch_exact(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_tokens_across_dp: torch.Tensor | None,
        num_speculative_steps: int,
    ) -> None:
        assert self.decode_cudagraph_manager is not None
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        for step in range(1, num_speculative_steps):
            step_desc = self.decode_cudagraph_manager.dispatch(
                num_reqs, num_reqs, 1, num_active_loras=0
            )
            slot_mappings = self.block_tables.compute_slot_mappings(
                idx_mapping, query_start_loc, positions, step_desc.num_tokens
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=step_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
            self.current_draft_step.fill_(step)
            if step_desc.cg_mode == CUDAGraphMode.FULL:
                self.decode_cudagraph_manager.run_fullgraph(step_desc)
                continue
            self._generate_draft(
                num_reqs,
                step_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=step_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )


class DCPEagleSpeculator(EagleSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._cached_dcp_lens: torch.Tensor | None = None

    def _stash_target_dcp(self, input_batch: InputBatch) -> None:
        self._cached_dcp_lens = input_batch.dcp_local_seq_lens

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _multi_step_decode_target_dcp(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        for step in range(1, num_speculative_steps):
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
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _decode_step_cached_dcp(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        dcp_lens = self._cached_dcp_lens
        if dcp_lens is not None:
            dcp_lens = dcp_lens[:num_reqs]
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            dcp_local_seq_lens=dcp_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_step_default_dcp(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if self._cached_dcp_lens is not None:
            assert self._cached_dcp_lens.shape[0] >= num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: SG104
    def _multi_step_decode_fresh_dcp(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        for step in range(1, num_speculative_steps):
            slot_mappings = self.block_tables.compute_slot_mappings(
                idx_mapping, query_start_loc, positions, batch_desc.num_tokens
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            dcp_lens = None
            if self.block_tables.cp_size > 1:
                dcp_lens = prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.block_tables.cp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=dcp_lens,
            )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _multi_step_decode_buffer_view(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        dcp_view = (
            local_lens_view(self.input_buffers, num_reqs) if self.dcp_size > 1 else None
        )
        for step in range(1, num_speculative_steps):
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
                dcp_local_seq_lens=dcp_view,
            )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _multi_step_decode_target_buffers(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        idx_mapping = self.idx_mapping[:num_reqs]
        target_dcp = (
            self.target_input_buffers.dcp_local_seq_lens[:num_reqs]
            if self.dcp_size > 1
            else None
        )
        for step, dcp_lens in iter_step_dcp_lens(target_dcp, num_speculative_steps):
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
                dcp_local_seq_lens=dcp_lens,
            )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )


class PartialDCPEagleSpeculator(EagleSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._dcp_prep: Callable[..., torch.Tensor | None] | None = None

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
        if block_tables.cp_size > 1:
            self._dcp_prep = partial(
                prepare_dcp_local_seq_lens,
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                dcp_size=block_tables.cp_size,
                dcp_rank=block_tables.cp_rank,
                cp_interleave=block_tables.cp_interleave,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG104
    def _decode_step_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        dcp_lens = self._dcp_prep(num_reqs) if self._dcp_prep is not None else None
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            dcp_local_seq_lens=dcp_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._generate_fused_drafts
    # expect: clean
    def _decode_step_metadata_inplace(
        self,
        attn_metadata: dict[str, Any],
        num_reqs: int,
    ) -> None:
        if self.supports_decode_metadata_update:
            self._update_draft_decode_metadata(attn_metadata, num_reqs)
