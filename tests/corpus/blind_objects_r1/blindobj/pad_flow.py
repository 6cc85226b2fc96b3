"""SG103 cases built from dataclasses and ``replace``, early returns and
branches on the mode, DP max / capped counts, a manager's own ``dispatch``
and helpers whose callers pass the padded count down."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp

from .base import BlindARBase
from .padding import qsl_with_padding_request


@dataclass(frozen=True)
class DraftStepPlan:
    """One draft decode batch as the dispatcher decided it."""

    batch_desc: BatchExecutionDescriptor
    # Real number of query tokens (one per request for draft decodes).
    num_tokens: int
    num_tokens_padded: int
    num_tokens_across_dp: torch.Tensor | None = None

    @property
    def attn_num_tokens(self) -> int:
        if self.batch_desc.cg_mode == CUDAGraphMode.FULL:
            return self.num_tokens_padded
        return self.num_tokens


class PlanMTP(BlindARBase):
    def _make_plan(
        self, num_reqs: int, dp_sync_state: DPSyncState | None
    ) -> DraftStepPlan:
        desc = self._dispatch_decode(num_reqs, dp_sync_state)
        return DraftStepPlan(
            batch_desc=desc,
            num_tokens=num_reqs,
            num_tokens_padded=desc.num_tokens,
            num_tokens_across_dp=self.decode_tokens_across_dp,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py dispatch_cg_and_sync_dp
    # expect: SG103
    def _plan_metadata_synced(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        plan = self._make_plan(num_reqs, dp_sync_state)
        # "Keep attention in step with the forward": adopt the padded count.
        plan = replace(plan, num_tokens=plan.num_tokens_padded)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=plan.batch_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, plan.num_tokens),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py dispatch_cg_and_sync_dp
    # expect: SG103
    def _plan_metadata_pinned(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        plan = self._make_plan(num_reqs, dp_sync_state)
        if plan.num_tokens_padded != plan.num_tokens:
            # Padded batch: build attention for the graph shape.
            plan = replace(
                plan,
                batch_desc=replace(plan.batch_desc, cg_mode=CUDAGraphMode.FULL),
            )
        return self._build_uniform_attn_metadata(
            batch_desc=plan.batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py dispatch_cg_and_sync_dp
    # expect: clean
    def _plan_metadata(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        plan = self._make_plan(num_reqs, dp_sync_state)
        plan = replace(plan, num_tokens_across_dp=self.decode_tokens_across_dp)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=plan.batch_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, plan.attn_num_tokens),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class EarlyReturnEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
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
            for groups in self.attn_groups:
                for group in groups:
                    group.map_to_kernel_block_table(
                        self.block_tables.input_block_tables[group.kv_cache_group_id]
                    )
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return

        # Only NONE / PIECEWISE batches reach this point.
        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings_by_layer = self._decode_slot_mappings(
                num_reqs, batch_desc.num_tokens
            )
            attn_metadata = self._build_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                query_start_loc_np=self._padding_qsl(
                    num_reqs, batch_desc.num_tokens
                ),
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


class EagerFirstEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
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
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            attn_metadata = None
            slot_mappings_by_layer = None
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    query_start_loc_np=self._padding_qsl(num_reqs, num_reqs),
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
            return

        # FULL replay: the captured shape owns the padded rows.
        for groups in self.attn_groups:
            for group in groups:
                group.map_to_kernel_block_table(
                    self.block_tables.input_block_tables[group.kv_cache_group_id]
                )
        assert self.decode_cudagraph_manager is not None
        self.decode_cudagraph_manager.run_fullgraph(batch_desc)


class InvertedBranchMTP(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG103
    def _branchy_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        is_full_cudagraph = batch_desc.cg_mode == CUDAGraphMode.FULL
        if is_full_cudagraph:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
        # Eager / piecewise: give the padding rows to a dummy request.
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, batch_desc.num_tokens),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _branchy_metadata_ok(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        is_full_cudagraph = batch_desc.cg_mode == CUDAGraphMode.FULL
        if not is_full_cudagraph:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
        # FULL replay: give the padding rows to a dummy request.
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, batch_desc.num_tokens),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class DPCountsEagle(BlindARBase):
    # idiom: sgl-project/sglang python/sglang/srt/layers/dp_attention.py DpPaddingMode.get_dp_padding_mode
    # expect: SG103
    def _dp_max_metadata(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs, dp_sync_state)
        across_dp = self.decode_tokens_across_dp
        # MAX_LEN: every rank runs the largest rank's token count.
        total = int(across_dp.max()) if across_dp is not None else num_reqs
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/dp_attention.py DpPaddingMode.get_dp_padding_mode
    # expect: clean
    def _dp_max_forward_only(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> None:
        desc = self._dispatch_decode(num_reqs, dp_sync_state)
        across_dp = self.decode_tokens_across_dp
        # The DP-wide max only feeds the forward context's collectives.
        max_across_dp = int(across_dp.max()) if across_dp is not None else num_reqs
        self._dp_max_tokens = max_across_dp
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
        slot_mappings = self._decode_slot_mappings(num_reqs, desc.num_tokens)
        self._run_decode_step(
            num_reqs, desc, attn_metadata, slot_mappings, step, self.num_speculative_steps
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/attn_utils.py FastPrefillHelper.prepare
    # expect: SG103
    def _capped_bucket_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        desc = self._dispatch_decode(num_reqs)
        # min(padded, cap) is still a padded count.
        total = min(self.pad_policy.pad_to_capture(num_reqs), self.max_num_tokens)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class LocalDispatchEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding
    # expect: SG103
    def _local_guarded_metadata(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        assert self.decode_cudagraph_manager is not None
        batch_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(dp_sync_state, num_reqs, 1)
            if dp_sync_state is not None
            else (None, num_reqs)
        )
        # This rank's own choice, before the DP ranks agree.
        local_desc = self.decode_cudagraph_manager.dispatch(
            num_reqs, num_batch_tokens, 1, 0
        )
        synced_desc, _ = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            dp_sync_state=batch_sync,
        )
        # Another rank may have forced eager; local_desc does not know that.
        total = (
            synced_desc.num_tokens
            if local_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=synced_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/dp_utils.py sync_cudagraph_and_dp_padding
    # expect: clean
    def _synced_guarded_metadata(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        assert self.decode_cudagraph_manager is not None
        batch_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(dp_sync_state, num_reqs, 1)
            if dp_sync_state is not None
            else (None, num_reqs)
        )
        local_desc = self.decode_cudagraph_manager.dispatch(
            num_reqs, num_batch_tokens, 1, 0
        )
        synced_desc, _ = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            dp_sync_state=batch_sync,
        )
        # Recorded for stats only.
        self._dp_overrode_mode = local_desc.cg_mode != synced_desc.cg_mode
        total = (
            synced_desc.num_tokens
            if synced_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=synced_desc,
            query_start_loc_np=self._padding_qsl(num_reqs, total),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class PassDownMTP(BlindARBase):
    """The padded count is handed down by callers to a building helper."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator._generate_draft
    # expect: SG103
    def _step_metadata(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        assert self.decode_desc is not None
        qsl = qsl_with_padding_request(self.arange_np, num_reqs, 1, num_tokens_padded)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=self.decode_desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    def _decode_steps(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> None:
        desc = self._dispatch_decode(num_reqs)
        slot_mappings = self._decode_slot_mappings(num_reqs, desc.num_tokens)
        for step in range(1, self.num_speculative_steps):
            attn_metadata = self._step_metadata(
                num_reqs, desc.num_tokens, seq_lens_cpu_upper_bound, step
            )
            self._run_decode_step(
                num_reqs, desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator._generate_draft
    # expect: clean
    def _guarded_step_metadata(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        num_tokens = (
            num_tokens_padded
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs
        )
        qsl = qsl_with_padding_request(self.arange_np, num_reqs, 1, num_tokens)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    def _guarded_decode_steps(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> None:
        desc = self._dispatch_decode(num_reqs)
        slot_mappings = self._decode_slot_mappings(num_reqs, desc.num_tokens)
        for step in range(1, self.num_speculative_steps):
            attn_metadata = self._guarded_step_metadata(
                num_reqs, desc.num_tokens, desc, seq_lens_cpu_upper_bound, step
            )
            self._run_decode_step(
                num_reqs, desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )
