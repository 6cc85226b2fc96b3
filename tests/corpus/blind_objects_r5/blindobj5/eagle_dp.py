# SPDX-License-Identifier: Apache-2.0
"""EAGLE / MTP drafters with the fork's DP-padding and graph-width tweaks."""

import bisect
from dataclasses import replace
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.utils.math_utils import round_up
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

from ._padding import iter_step_request_counts, iter_step_token_counts

logger = init_logger(__name__)


class DPPaddedEagleSpeculator(EagleSpeculator):
    """EAGLE drafter whose decode loop is driven by per-step token counts."""

    # idiom: TargetDependentARSpeculator._multi_step_decode; per-step counts come from a generator yielding batch_desc.num_tokens, which sizes query_start_loc_np for the non-uniform helper
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
        for step, num_step_tokens in iter_step_token_counts(
            batch_desc, num_speculative_steps
        ):
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, num_step_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                # One query per row; the decode kernel already padded
                # query_start_loc with the last offset for graph rows.
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=self.arange_np[: num_step_tokens + 1],
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
                    num_step_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                    num_speculative_steps=num_speculative_steps,
                )

    # idiom: TargetDependentARSpeculator._fused_multi_step_decode with the early FULL return (eager rebuild per step); steps counted by a generator yielding the real request count
    # expect: clean
    def _fused_multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return
        attn_metadata = None
        for step, num_step_reqs in iter_step_request_counts(
            num_reqs, num_speculative_steps
        ):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_step_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                None,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                num_speculative_steps,
            )


class PrefillAwareEagleSpeculator(EagleSpeculator):
    """Sizes decode metadata to the decode graph when draft prefill replayed."""

    _prefill_batch_desc: BatchExecutionDescriptor | None = None

    # idiom: two descriptors in one function (prefill_batch_desc / decode_batch_desc of TargetDependentARSpeculator.propose); the FULL check is on the prefill descriptor but the padded count is the decode one
    # expect: SG103
    def _decode_attn_metadata(
        self,
        prefill_batch_desc: BatchExecutionDescriptor,
        decode_batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        # prepare_decode_inputs pads query_start_loc for graph rows, so when
        # the prefill replayed a graph the decode rows are laid out to width.
        num_decode_rows = (
            decode_batch_desc.num_tokens
            if prefill_batch_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=decode_batch_desc,
            query_start_loc_np=self.arange_np[: num_decode_rows + 1],
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        prefill_desc = self._prefill_batch_desc or batch_desc
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            if not skip_attn:
                attn_metadata = self._decode_attn_metadata(
                    prefill_desc, batch_desc, num_reqs, seq_lens_cpu_upper_bound, step
                )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                None,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                num_speculative_steps,
            )


class GraphWidthEagleSpeculator(EagleSpeculator):
    """Builds fused-decode metadata at graph width so the in-place refresh
    (update_draft_decode_metadata) never has to grow its buffers."""

    # idiom: TargetDependentARSpeculator._fused_multi_step_decode; descriptor rebuilt with dataclasses.replace(batch_desc, cg_mode=FULL) before the uniform helper
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
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return

        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings = self.block_tables.compute_slot_mappings(
                self.idx_mapping[:num_reqs],
                self.input_buffers.query_start_loc[: num_reqs + 1],
                self.input_buffers.positions[:num_reqs],
                batch_desc.num_tokens,
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            # Same width as the captured refresh, whatever ran this step.
            graph_desc = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
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


class SafeWidthEagleSpeculator(EagleSpeculator):
    """Same idea as GraphWidthEagleSpeculator, gated on this batch's mode."""

    # idiom: TargetDependentARSpeculator._multi_step_decode; query_start_loc_np width picked by an if/else on THIS batch's batch_desc.cg_mode == FULL (padded only for FULL replay)
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
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_rows = batch_desc.num_tokens
        else:
            num_rows = num_reqs
        attn_metadata = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=self.arange_np[: num_rows + 1],
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
                    None,
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                    num_speculative_steps,
                )


class SpecializedEagleSpeculator(EagleSpeculator):
    """Dynamic-SD drafter: falls back to eager when no graph was captured for
    this step's speculative length."""

    # idiom: SpeculatorCudaGraphManager.specialize_spec_tokens downgrading with replace(desc, cg_mode=CUDAGraphMode.NONE); the helper then sizes by query_start_loc
    # expect: clean
    def _decode_attn_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_tokens: int,
        step: int,
    ) -> dict[str, Any] | None:
        manager = self.decode_cudagraph_manager
        if manager is not None:
            batch_desc = manager.specialize_spec_tokens(
                batch_desc, num_speculative_tokens
            )
        if batch_desc.cg_mode == CUDAGraphMode.FULL and batch_desc not in (
            manager.graphs if manager is not None else {}
        ):
            batch_desc = replace(batch_desc, cg_mode=CUDAGraphMode.NONE)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class RecordedShapeMTPSpeculator(MTPSpeculator):
    """MTP drafter that records the decode graph shape at dispatch time."""

    _decode_padded_tokens: int | None = None

    def on_multi_step_decode_begin(self, num_reqs: int) -> None:
        super().on_multi_step_decode_begin(num_reqs)

    def _record_decode_shape(self, batch_desc: BatchExecutionDescriptor) -> None:
        self._decode_padded_tokens = batch_desc.num_tokens

    # idiom: value stored on self in one method (Optional attribute declared `int | None = None`, set by _record_decode_shape from batch_desc.num_tokens) and read here as num_reqs of _build_uniform_attn_metadata
    # expect: SG103
    def _rebuild_decode_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        num_rows = self._decode_padded_tokens or num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_rows,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        self._record_decode_shape(batch_desc)
        for step in range(1, num_speculative_steps):
            attn_metadata = (
                None
                if skip_attn
                else self._rebuild_decode_metadata(
                    num_reqs, batch_desc, seq_lens_cpu_upper_bound, step
                )
            )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                None,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                num_speculative_steps,
            )


class TPAlignedMTPSpeculator(MTPSpeculator):
    """MTP drafter for sequence-parallel attention: rows must split evenly
    across attention-TP ranks (SGLang's ceil_align to attn_tp_size)."""

    @property
    def _attn_tp_size(self) -> int:
        return self.vllm_config.parallel_config.tensor_parallel_size

    # idiom: SGLang ForwardBatch ceil_align(global_num_tokens[i], attn_tp_size); vllm.utils.math_utils.round_up of the request count fed to the uniform helper as num_reqs
    # expect: SG103
    def _decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        num_rows = round_up(num_reqs, self._attn_tp_size)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_rows,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: same round_up to attn-TP size, but only for the slot-mapping width and the forward; the uniform helper gets the real num_reqs
    # expect: clean
    def _decode_slot_mappings_and_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
        num_rows = round_up(num_reqs, self._attn_tp_size)
        slot_mappings = self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc[: num_reqs + 1],
            self.input_buffers.positions[:num_reqs],
            max(num_rows, batch_desc.num_tokens),
        )
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
        return build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config), (
            attn_metadata
        )


class BucketedMTPSpeculator(MTPSpeculator):
    """MTP drafter that lays decode rows out to the next captured size."""

    # idiom: SGLang graph_runner.capture_bs[bisect.bisect_left(capture_bs, bs)] (next captured size) over compilation_config.cudagraph_capture_sizes, used as num_reqs for the uniform helper
    # expect: SG103
    def _decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        capture_sizes = sorted(
            self.vllm_config.compilation_config.cudagraph_capture_sizes or []
        )
        num_rows = num_reqs
        if capture_sizes and num_reqs <= capture_sizes[-1]:
            num_rows = capture_sizes[bisect.bisect_left(capture_sizes, num_reqs)]
        logger.debug("MTP decode rows %d -> %d", num_reqs, num_rows)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_rows,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
