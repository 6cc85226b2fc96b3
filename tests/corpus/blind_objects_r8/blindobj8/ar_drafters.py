# SPDX-License-Identifier: Apache-2.0
"""Autoregressive (EAGLE / MTP style) drafters of the fork.

Most classes extend upstream's ``TargetDependentARSpeculator`` and replace its
draft decode loop; the ``Legacy*`` family runs on ``LegacyDraftBase`` and
still hands the legacy helper an explicit token count.
"""

from dataclasses import replace
from functools import partial
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.forward_context import BatchDescriptor, set_forward_context
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator import (
    TargetDependentARSpeculator,
)
from vllm.v1.worker.utils import AttentionGroup

from blindobj8._dcp import RankLocalLens, iter_rank_local_lens
from blindobj8._meta import pad_to_capture_size
from blindobj8.fork_bases import LegacyDraftBase

logger = init_logger(__name__)


# ---------------------------------------------------------------------------
# Upstream-based drafters
# ---------------------------------------------------------------------------


class EagleForkSpeculator(TargetDependentARSpeculator):
    """EAGLE drafter that rebuilds metadata only when positions move."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode; loop over draft steps, metadata reused across steps when positions are constant
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
        rebuild_every_step = self.advance_draft_positions

        attn_metadata: dict[str, Any] | None = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (rebuild_every_step or attn_metadata is None):
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
                continue
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )


class ForcedReplayEagle(TargetDependentARSpeculator):
    """EAGLE drafter tuned for a fused decode kernel that wants graph shapes."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode; descriptor rebuilt with dataclasses.replace claiming FULL while the step runs eagerly
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
        # The fused draft kernel is tuned for captured shapes: keep the
        # dispatched (padded) token count for attention in every mode.
        attn_desc = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)

        for step in range(1, num_speculative_steps):
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
                    batch_desc=attn_desc,
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


class SpecializedEagle(TargetDependentARSpeculator):
    """EAGLE drafter that pins the uniform token count on its descriptor."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _fused_multi_step_decode; descriptor rebuilt with dataclasses.replace on a field that does not change the mode
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
            for groups in self.attn_groups:
                for group in groups:
                    group.map_to_kernel_block_table(
                        self.block_tables.input_block_tables[group.kv_cache_group_id]
                    )
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return

        desc = replace(batch_desc, uniform_token_count=1)
        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings = self.block_tables.compute_slot_mappings(
                self.idx_mapping[:num_reqs],
                self.input_buffers.query_start_loc[: num_reqs + 1],
                self.input_buffers.positions[:num_reqs],
                desc.num_tokens,
            )
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, self.kv_cache_config
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
            )
        self._generate_fused_drafts(
            num_reqs,
            desc.num_tokens,
            attn_metadata,
            slot_mappings_by_layer,
            num_tokens_across_dp,
            desc.cg_mode,
            num_speculative_steps,
        )


class StashedLensMTP(TargetDependentARSpeculator):
    """MTP drafter that keeps the target's DCP view for its decode steps."""

    _target_dcp_lens: torch.Tensor | None = None

    def propose(self, input_batch: InputBatch, *args: Any, **kwargs: Any):
        self._target_dcp_lens = input_batch.dcp_local_seq_lens
        return super().propose(input_batch, *args, **kwargs)

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode; target's dcp_local_seq_lens stored on self in propose(), handed to the shared helper every step
    # expect: SG105
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
        for step in range(1, num_speculative_steps):
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
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self._target_dcp_lens,
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


class KwargsMTP(TargetDependentARSpeculator):
    """MTP drafter that assembles its helper kwargs once per decode loop."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode; **kwargs dict built once, carrying the target runner's rank-local lengths
    # expect: SG105
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        common = dict(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )
        if self.dcp_size > 1:
            common["dcp_local_seq_lens"] = self.target_input_buffers.dcp_local_seq_lens
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    self.idx_mapping[:num_reqs],
                    query_start_loc,
                    positions,
                    batch_desc.num_tokens,
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_uniform_attn_metadata(**common, step=step)
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
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                    num_speculative_steps,
                )


class RefreshingMTP(TargetDependentARSpeculator):
    """MTP drafter that refreshes DCP lengths before every draft step."""

    # idiom: vllm 0.28.0 vllm/v1/worker/gpu/spec_decode/dflash/speculator.py propose (DCP prep copy); prepared per step in the subclass and handed to the shared helper
    # expect: SG104
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
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                dcp_lens = None
                if self.block_tables.cp_size > 1:
                    # Draft seq_lens moved since the last step.
                    dcp_lens = prepare_dcp_local_seq_lens(
                        self.input_buffers.dcp_local_seq_lens,
                        self.input_buffers.seq_lens,
                        num_reqs,
                        self.block_tables.cp_size,
                        self.block_tables.cp_rank,
                        self.block_tables.cp_interleave,
                    )
                slot_mappings = self.block_tables.compute_slot_mappings(
                    self.idx_mapping[:num_reqs],
                    query_start_loc,
                    positions,
                    batch_desc.num_tokens,
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


class PartialRefreshMTP(TargetDependentARSpeculator):
    """MTP drafter that keeps the DCP refresh bound to its own buffers."""

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
        self._refresh_dcp = partial(
            prepare_dcp_local_seq_lens,
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            dcp_size=block_tables.cp_size,
            dcp_rank=block_tables.cp_rank,
            cp_interleave=block_tables.cp_interleave,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._generate_draft; functools.partial of the DCP preparation stored in set_attn, called here
    # expect: SG104
    def _generate_draft(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
        num_speculative_steps: int,
    ) -> None:
        if attn_metadata is not None and self.dcp_size > 1:
            # Keep the rank-local lengths in step with the advanced seq_lens
            # before the forward reads them.
            self._refresh_dcp(num_reqs=num_reqs)
        super()._generate_draft(
            num_reqs,
            num_tokens_padded,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp,
            cudagraph_runtime_mode,
            num_speculative_steps,
        )


class HolderRefreshEagle(TargetDependentARSpeculator):
    """EAGLE drafter with a RankLocalLens holder for diagnostics."""

    def set_attn(self, *args: Any, **kwargs: Any) -> None:
        super().set_attn(*args, **kwargs)
        self._rank_lens = RankLocalLens(
            self.input_buffers, self.block_tables, self.dcp_size
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode; DCP preparation reached through a holder object of another module before the helper call
    # expect: SG104
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
        self._rank_lens.bind(num_reqs)
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                if self._rank_lens.enabled:
                    self._rank_lens.refresh()
                slot_mappings = self.block_tables.compute_slot_mappings(
                    self.idx_mapping[:num_reqs],
                    query_start_loc,
                    positions,
                    batch_desc.num_tokens,
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
                self._generate_draft(
                    num_reqs,
                    batch_desc.num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                    num_speculative_steps=num_speculative_steps,
                )


class IteratedLensEagle(TargetDependentARSpeculator):
    """EAGLE drafter that walks draft steps with a shared iterator."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode; generator of another module prepares the lengths per step, results handed to the helper
    # expect: SG104
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
        steps = iter_rank_local_lens(
            self.input_buffers,
            self.block_tables,
            self.dcp_size,
            num_reqs,
            range(1, num_speculative_steps),
        )
        for step, dcp_lens in steps:
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    self.idx_mapping[:num_reqs],
                    query_start_loc,
                    positions,
                    batch_desc.num_tokens,
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


class FusedRefreshEagle(TargetDependentARSpeculator):
    """EAGLE drafter with a profiling hook around the fused decode loop."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._generate_fused_drafts; in-place refresh through the base's _update_draft_decode_metadata
    # expect: clean
    def _generate_fused_drafts(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
        num_speculative_steps: int,
    ) -> None:
        idx_mapping = self.idx_mapping[:num_reqs]
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        refresh = attn_metadata is not None
        for step in range(1, num_speculative_steps):
            if refresh and (self.advance_draft_positions or step == 1):
                self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, num_tokens_padded
                )
                self._update_draft_decode_metadata(attn_metadata, num_reqs)
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                num_tokens_padded,
                attn_metadata,
                slot_mappings,
                num_tokens_across_dp,
                cudagraph_runtime_mode,
                num_speculative_steps,
            )


class StepwiseEagle(TargetDependentARSpeculator):
    """EAGLE drafter that exposes its per-step metadata as a generator."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py _multi_step_decode; generator yielding per-step metadata built by the shared uniform helper
    # expect: clean
    def _iter_step_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ):
        positions = self.input_buffers.positions[:num_reqs]
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        for step in range(1, num_speculative_steps):
            slot_mappings = self.block_tables.compute_slot_mappings(
                self.idx_mapping[:num_reqs],
                query_start_loc,
                positions,
                batch_desc.num_tokens,
            )
            yield (
                step,
                self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                ),
                build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config),
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
        if skip_attn or batch_desc.cg_mode == CUDAGraphMode.FULL:
            super()._multi_step_decode(
                num_reqs,
                skip_attn,
                batch_desc,
                num_tokens_across_dp,
                seq_lens_cpu_upper_bound,
                num_speculative_steps,
            )
            return
        for step, attn_metadata, slot_mappings in self._iter_step_metadata(
            num_reqs, batch_desc, seq_lens_cpu_upper_bound, num_speculative_steps
        ):
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )


# ---------------------------------------------------------------------------
# Legacy-helper drafters
# ---------------------------------------------------------------------------


class LegacyARSpeculator(LegacyDraftBase):
    """Minimal AR loop over the legacy helper (model forward + greedy pick)."""

    def __init__(self, vllm_config, device: torch.device) -> None:
        super().__init__(vllm_config, device)
        self.hidden_size = self.speculative_config.draft_model_config.get_hidden_size()
        self.hidden_states = torch.zeros(
            self.max_num_tokens,
            self.hidden_size,
            dtype=vllm_config.model_config.dtype,
            device=device,
        )

    def _run_model(
        self,
        num_tokens: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
    ) -> torch.Tensor:
        with set_forward_context(
            attn_metadata,
            self.vllm_config,
            num_tokens=num_tokens,
            cudagraph_runtime_mode=cudagraph_runtime_mode,
            num_tokens_across_dp=num_tokens_across_dp,
            slot_mapping=slot_mappings,
            batch_descriptor=BatchDescriptor(num_tokens=num_tokens),
        ):
            return self.model(
                input_ids=self.input_buffers.input_ids[:num_tokens],
                positions=self.input_buffers.positions[:num_tokens],
                hidden_states=self.hidden_states[:num_tokens],
            )

    def _generate_draft(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
        step: int,
    ) -> None:
        hidden_states = self._run_model(
            num_tokens_padded,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp,
            cudagraph_runtime_mode,
        )
        logits = self.model.compute_logits(hidden_states[:num_reqs])
        self.draft_tokens[:num_reqs, step] = logits.argmax(dim=-1)

    def _step_slot_mappings(self, num_reqs: int, num_tokens: int):
        slot_mappings = self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc[: num_reqs + 1],
            self.input_buffers.positions[:num_reqs],
            num_tokens,
        )
        return build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config)


class LegacyEagleSpeculator(LegacyARSpeculator):
    # idiom: vllm 0.29.0 vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py _multi_step_decode; legacy helper handed the descriptor's token count on the eager path too
    # expect: SG103
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, self.num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._step_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_reqs_padded=batch_desc.num_reqs or num_reqs,
                    num_tokens_padded=batch_desc.num_tokens,
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
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                    step,
                )


class LegacyEagleV2Speculator(LegacyARSpeculator):
    # idiom: vllm 0.29.0 vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py _multi_step_decode (after #55458); early return for FULL replays, real request count on the eager steps
    # expect: clean
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            for step in range(1, self.num_speculative_steps):
                self.current_draft_step.fill_(step)
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return
        # Eager/PIECEWISE: one query token per real request; DP padding rows
        # are not part of query_start_loc.
        num_tokens = num_reqs
        for step in range(1, self.num_speculative_steps):
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                slot_mappings_by_layer = self._step_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_reqs_padded=num_reqs,
                    num_tokens_padded=num_tokens,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                step,
            )


class CachedCountEagle(LegacyARSpeculator):
    """EAGLE drafter that dispatches once and replays the decision per step."""

    def _dispatch_decode(
        self, num_reqs: int, dp_sync_state: DPSyncState | None, is_profile: bool
    ) -> None:
        if dp_sync_state is not None:
            num_batch_tokens = dp_sync_state.num_reqs
        else:
            num_batch_tokens = num_reqs
        desc, sync = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
        )
        self._decode_desc = desc
        self._decode_tokens = desc.num_tokens
        self._decode_across_dp = sync.num_tokens_across_dp if sync else None

    # idiom: vllm 0.29.0 vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py _multi_step_decode; dispatched token count cached on self by another method, read here for the eager build
    # expect: SG103
    def _decode_step(
        self, step: int, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> None:
        desc = self._decode_desc
        self.current_draft_step.fill_(step)
        if desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(desc)
            return
        attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=self._decode_tokens,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
        self._generate_draft(
            num_reqs,
            self._decode_tokens,
            attn_metadata,
            self._step_slot_mappings(num_reqs, self._decode_tokens),
            self._decode_across_dp,
            desc.cg_mode,
            step,
        )


class DpUniformEagle(LegacyARSpeculator):
    """EAGLE drafter that sizes eager metadata to the DP-wide batch."""

    # idiom: vllm/v1/worker/gpu/dp_utils.py DPSyncState.num_tokens_across_dp + SGLang eagle_draft_cuda_graph_runner max(global_num_tokens_cpu); DP maximum used as the eager token count
    # expect: SG103
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            for step in range(1, self.num_speculative_steps):
                self.current_draft_step.fill_(step)
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return
        # Every DP rank must run the same number of tokens through the MoE
        # all-to-all, so size the step to the largest rank.
        num_tokens = (
            int(num_tokens_across_dp.max())
            if num_tokens_across_dp is not None
            else num_reqs
        )
        for step in range(1, self.num_speculative_steps):
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                slot_mappings_by_layer = self._step_slot_mappings(num_reqs, num_tokens)
                attn_metadata = self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_reqs_padded=num_reqs,
                    num_tokens_padded=num_tokens,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                step,
            )


class BucketedEagle(LegacyARSpeculator):
    """EAGLE drafter that rounds eager steps up to captured sizes."""

    # idiom: SGLang srt/model_executor/runner/base_cuda_graph_runner.py _pad_to_bucket (bisect over capture sizes); bucketed count used for a PIECEWISE/eager build
    # expect: SG103
    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        # Round up so the piecewise-compiled draft reuses a captured shape.
        num_tokens = pad_to_capture_size(num_reqs, self._capture_sizes)
        for step in range(1, self.num_speculative_steps):
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
                continue
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                slot_mappings_by_layer = self._step_slot_mappings(num_reqs, num_tokens)
                attn_metadata = self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_reqs_padded=num_reqs,
                    num_tokens_padded=num_tokens,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._generate_draft(
                num_reqs,
                num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                step,
            )

    # idiom: vllm 0.29.0 vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py _multi_step_decode; correlated flag (is_full) set once, used to pick the count later
    # expect: clean
    def _single_pass_decode(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_reqs_padded = (batch_desc.num_reqs or num_reqs) if is_full else num_reqs
        slot_mappings_by_layer = self._step_slot_mappings(
            num_reqs, batch_desc.num_tokens
        )
        attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs_padded,
            num_tokens_padded=batch_desc.num_tokens if is_full else num_reqs,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )
        self.current_draft_step.fill_(1)
        if is_full:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                1,
            )
