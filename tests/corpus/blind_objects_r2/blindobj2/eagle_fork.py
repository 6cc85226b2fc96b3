# Eagle drafter variants used by the fork's serving stack.
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

from blindobj2._pad import (
    ceil_align,
    dp_max_tokens,
    next_capture_size,
    pad_query_start_loc,
    uniform_qsl,
)


class PaddedEagleSpeculator(EagleSpeculator):
    """Eagle drafter that keeps draft decode shapes aligned to capture sizes."""

    token_alignment: int = 8

    @property
    def capture_sizes(self) -> list[int]:
        cfg = self.vllm_config.compilation_config
        return sorted(cfg.cudagraph_capture_sizes or [1])

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _decode_metadata_forced_full(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        # Always replay the FULL-sized shape so attention never re-plans.
        full_desc = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
        return self._build_uniform_attn_metadata(
            batch_desc=full_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_metadata_keep_mode(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        # Only re-pad the descriptor when this batch will replay a FULL graph.
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            batch_desc = replace(
                batch_desc,
                num_tokens=next_capture_size(self.capture_sizes, batch_desc.num_tokens),
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill
    # expect: SG103
    def _prefill_md_aligned(
        self,
        input_batch,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        num_tokens = int(input_batch.query_start_loc_np[num_reqs])
        aligned = ceil_align(num_tokens, self.token_alignment)
        desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=aligned,
            num_reqs=num_reqs,
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill
    # expect: clean
    def _prefill_md_eager(
        self,
        input_batch,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        num_tokens = int(input_batch.query_start_loc_np[num_reqs])
        # The aligned count only sizes the slot-mapping buffer below.
        self._slot_rows = ceil_align(num_tokens, self.token_alignment)
        desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE,
            num_tokens=num_tokens,
            num_reqs=num_reqs,
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: SG103
    def _decode_md_padded_offsets(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        qsl = uniform_qsl(self.arange_np, num_reqs, 1)
        # Let the last request absorb graph padding so offsets line up with
        # the padded slot mappings.
        qsl = pad_query_start_loc(qsl, num_reqs, batch_desc.num_tokens)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: clean
    def _decode_md_padded_offsets_full_only(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        qsl = uniform_qsl(self.arange_np, num_reqs, 1)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            qsl = pad_query_start_loc(qsl, num_reqs, batch_desc.num_tokens)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class DPAlignedEagleSpeculator(EagleSpeculator):
    """Eagle drafter for DP deployments; every rank runs the same draft shape."""

    def _remember_dp(self, sync: DPSyncState | None) -> None:
        self._dp_sync = sync
        self._dp_tokens = (
            None if sync is None else sync.num_tokens_across_dp.clone()
        )

    @property
    def _dp_full_desc(self) -> BatchExecutionDescriptor:
        n = dp_max_tokens(self._dp_tokens, self.max_num_reqs)
        return BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL, num_tokens=n, num_reqs=n
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _dp_decode_md(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode != CUDAGraphMode.FULL and self._dp_sync is None:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
        # DP: match the widest rank so collectives line up.
        return self._build_uniform_attn_metadata(
            batch_desc=self._dp_full_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _dp_decode_md_checked(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        desc = batch_desc
        if batch_desc.cg_mode == CUDAGraphMode.FULL and self._dp_sync is not None:
            # Both sides already agree on FULL; widen to the DP max.
            desc = self._dp_full_desc
        return self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: SG103
    def _dispatch_and_build(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        is_profile: bool = False,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        prefill_desc, _ = dispatch_cg_and_sync_dp(
            self.prefill_cudagraph_manager,
            num_reqs,
            num_reqs * (self.num_speculative_steps + 1),
            self.num_speculative_steps + 1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=dp_sync_state,
        )
        decode_desc, decode_sync = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_reqs,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
        )
        self._remember_dp(decode_sync)
        # Prefill went to a FULL graph, so decode can assume FULL as well.
        if prefill_desc.cg_mode == CUDAGraphMode.FULL:
            decode_desc = replace(decode_desc, cg_mode=CUDAGraphMode.FULL)
        md = self._build_uniform_attn_metadata(
            batch_desc=decode_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )
        return decode_desc, md

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: clean
    def _dispatch_and_build_plain(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        is_profile: bool = False,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        decode_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(dp_sync_state, num_reqs, 1)
            if dp_sync_state is not None
            else (None, num_reqs)
        )
        decode_desc, decode_sync = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=decode_sync,
        )
        self._remember_dp(decode_sync)
        md = self._build_uniform_attn_metadata(
            batch_desc=decode_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )
        return decode_desc, md

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG103
    def _md_from_dp_tensor(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        qsl = np.array(self.arange_np[: num_reqs + 1], copy=True)
        if num_tokens_across_dp is not None:
            # Pad every rank to the same number of tokens.
            qsl[num_reqs] = int(num_tokens_across_dp[self.dp_rank])
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._generate_draft
    # expect: clean
    def _md_and_forward_tokens(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> tuple[dict[str, Any] | None, int]:
        md = self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
        # The forward context still wants the DP-wide padded count.
        fwd_tokens = dp_max_tokens(num_tokens_across_dp, batch_desc.num_tokens)
        return md, fwd_tokens


class BucketedEagleSpeculator(EagleSpeculator):
    """Keeps a functools.partial for the per-step metadata build."""

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        super().init_cudagraph_manager(cudagraph_mode)
        self._bucket = next_capture_size(
            sorted(self.vllm_config.compilation_config.cudagraph_capture_sizes or [1]),
            self.max_num_reqs,
        )
        self._step_md = partial(
            self._build_uniform_attn_metadata,
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.FULL,
                num_tokens=self._bucket,
                num_reqs=self._bucket,
                uniform_token_count=1,
            ),
            num_query_per_req=1,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _multi_step_decode_bucketed(
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
            slot_maps = None
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_maps = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                if batch_desc.cg_mode == CUDAGraphMode.PIECEWISE:
                    attn_metadata = self._step_md(
                        num_reqs=num_reqs,
                        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                        step=step,
                    )
                else:
                    attn_metadata = self._build_uniform_attn_metadata(
                        batch_desc=batch_desc,
                        num_reqs=num_reqs,
                        num_query_per_req=1,
                        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                        step=step,
                    )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_maps,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                num_speculative_steps,
            )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _multi_step_decode_bucketed_full(
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
            slot_maps = None
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_maps = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    attn_metadata = self._step_md(
                        num_reqs=num_reqs,
                        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                        step=step,
                    )
                else:
                    attn_metadata = self._build_uniform_attn_metadata(
                        batch_desc=batch_desc,
                        num_reqs=num_reqs,
                        num_query_per_req=1,
                        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                        step=step,
                    )
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_maps,
                num_tokens_across_dp,
                batch_desc.cg_mode,
                num_speculative_steps,
            )
