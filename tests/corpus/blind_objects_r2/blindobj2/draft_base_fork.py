# Fork overrides of the generic draft-model speculator plumbing.
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)

from blindobj2._pad import DcpLenCache, next_capture_size, refresh_dcp_lens


class DraftOnlyLayersSpeculator(StandaloneARSpeculator):
    """Standalone drafter that hides target layers from the draft forward."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG102
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        md = super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
            slot_mappings=slot_mappings,
        )
        if md is None:
            return None
        return {k: v for k, v in md.items() if k in self.draft_attn_layer_names}


class StepResetSpeculator(StandaloneARSpeculator):
    """Standalone drafter that recomputes the upper bound itself."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG102
    def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np,
                             seq_lens_cpu_upper_bound, step, **kwargs):
        # The caller's upper bound already includes the draft step.
        return super()._build_attn_metadata(
            num_reqs, batch_desc, query_start_loc_np,
            seq_lens_cpu_upper_bound, 0, **kwargs,
        )


class TracedSpeculator(StandaloneARSpeculator):
    """Standalone drafter with NVTX ranges around metadata builds."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np,
                             seq_lens_cpu_upper_bound, step, **kwargs):
        with torch.cuda.nvtx.range(f"draft_attn_md_step{step}"):
            return super()._build_attn_metadata(
                num_reqs, batch_desc, query_start_loc_np,
                seq_lens_cpu_upper_bound, step, **kwargs,
            )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: clean
    def _build_uniform_attn_metadata(self, batch_desc, num_reqs, num_query_per_req,
                                     seq_lens_cpu_upper_bound, step, **kwargs):
        assert num_query_per_req >= 1, "uniform batches have at least one query"
        return super()._build_uniform_attn_metadata(
            batch_desc, num_reqs, num_query_per_req,
            seq_lens_cpu_upper_bound, step, **kwargs,
        )


class ClampedBoundSpeculator(EagleSpeculator):
    """Eagle drafter that bounds the draft upper bound by the draft window."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: SG102
    def _build_uniform_attn_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        num_query_per_req: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        window = getattr(self.draft_model_config.hf_config, "sliding_window", None)
        if window is not None:
            seq_lens_cpu_upper_bound = seq_lens_cpu_upper_bound.clamp(max=window)
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class OwnSlotsSpeculator(EagleSpeculator):
    """Eagle drafter writing KV through a private slot buffer."""

    def set_attn(self, *args, **kwargs) -> None:
        super().set_attn(*args, **kwargs)
        self._private_slots = torch.empty_like(self.block_tables.slot_mappings)

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG102
    def _build_attn_metadata(self, *args, slot_mappings=None, **kwargs):
        return super()._build_attn_metadata(
            *args, slot_mappings=self._private_slots, **kwargs
        )


class CallerSlotsSpeculator(EagleSpeculator):
    """Eagle drafter that picks private slots at the call site instead."""

    def set_attn(self, *args, **kwargs) -> None:
        super().set_attn(*args, **kwargs)
        self._private_slots = torch.empty_like(self.block_tables.slot_mappings)

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _md_with_private_slots(self, num_reqs, batch_desc, qsl_np, bound, step):
        # Caller-side choice of slot mappings, through the shared helper.
        n = int(qsl_np[num_reqs])
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl_np,
            seq_lens_cpu_upper_bound=bound,
            step=step,
            slot_mappings=self._private_slots[:, :n],
        )


class PartialBuildSpeculator(DraftModelSpeculator):
    """Abstract base for fork drafters that pre-bind the metadata builder."""

    def set_attn(self, *args, **kwargs) -> None:
        super().set_attn(*args, **kwargs)
        self._builder = partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=self.kv_cache_config,
        )
        self._helper = partial(self._build_attn_metadata, causal=True)

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG101
    def _md_via_bound_builder(self, num_reqs: int, qsl_cpu: torch.Tensor):
        n = int(qsl_cpu[num_reqs])
        return self._builder(
            num_reqs=num_reqs,
            num_tokens=n,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=qsl_cpu,
            max_query_len=int((qsl_cpu[1:] - qsl_cpu[:-1]).max()),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :n],
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _md_via_bound_helper(self, num_reqs: int, batch_desc, qsl_np, bound):
        return self._helper(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl_np,
            seq_lens_cpu_upper_bound=bound,
            step=0,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: SG104
    def _refresh_then_rebuild(self, num_reqs: int, batch_desc, bound, step: int):
        if self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        if not self.supports_decode_metadata_update:
            # Fall back to a full rebuild.
            return self._build_uniform_attn_metadata(
                batch_desc, num_reqs, 1, bound, step
            )
        return None

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: clean
    def _refresh_or_rebuild(self, attn_metadata, num_reqs: int, batch_desc, bound,
                            step: int):
        if self.supports_decode_metadata_update and attn_metadata is not None:
            self._update_draft_decode_metadata(attn_metadata, num_reqs)
            return attn_metadata
        return self._build_uniform_attn_metadata(batch_desc, num_reqs, 1, bound, step)


class LenCacheSpeculator(EagleSpeculator):
    """Eagle drafter that keeps rank-local lengths across propose() calls."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lens = DcpLenCache()

    def on_prefill_end(self, num_reqs: int) -> None:
        super().on_prefill_end(num_reqs)
        self._lens.put(0, refresh_dcp_lens(self, num_reqs))

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _decode_md_prefill_lens(self, num_reqs, batch_desc, bound, step):
        # Lengths were computed right after draft prefill.
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=bound,
            step=step,
            dcp_local_seq_lens=self._lens.last,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_md_fresh_lens(self, num_reqs, batch_desc, bound, step):
        self._lens.put(step, refresh_dcp_lens(self, num_reqs))
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=bound,
            step=step,
            dcp_local_seq_lens=self._lens.get(step),
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: SG105
    def _decode_md_from_target_md(self, attn_metadata: dict[str, Any], num_reqs,
                                  batch_desc, bound):
        # Pull rank-local lengths off the target's common metadata.
        first = next(iter(attn_metadata.values()))
        target_lens = getattr(first, "dcp_local_seq_lens", None)
        return self._build_uniform_attn_metadata(
            batch_desc, num_reqs, 1, bound, 1, True, target_lens
        )

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose
    # expect: clean
    def _decode_md_ignore_target_md(self, attn_metadata: dict[str, Any], num_reqs,
                                    batch_desc, bound):
        first = next(iter(attn_metadata.values()))
        # Only used to sanity-check the layout; draft lengths come from the helper.
        assert getattr(first, "dcp_local_seq_lens", None) is None or self.dcp_size > 1
        return self._build_uniform_attn_metadata(batch_desc, num_reqs, 1, bound, 1, True)


class CaptureSizedSpeculator(EagleSpeculator):
    """Eagle drafter that rounds the draft decode batch to capture sizes."""

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _decode_md_round_to_capture(self, num_reqs, batch_desc, bound, step):
        sizes = sorted(self.vllm_config.compilation_config.cudagraph_capture_sizes)
        padded = next_capture_size(sizes, num_reqs)
        desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL
            if batch_desc.cg_mode != CUDAGraphMode.NONE
            else CUDAGraphMode.NONE,
            num_tokens=padded,
            num_reqs=padded,
            uniform_token_count=1,
        )
        return self._build_uniform_attn_metadata(desc, num_reqs, 1, bound, step)

    # idiom: vllm v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_md_round_to_capture_full(self, num_reqs, batch_desc, bound, step):
        sizes = sorted(self.vllm_config.compilation_config.cudagraph_capture_sizes)
        padded = next_capture_size(sizes, num_reqs)
        desc = BatchExecutionDescriptor(
            cg_mode=batch_desc.cg_mode,
            num_tokens=padded if batch_desc.cg_mode == CUDAGraphMode.FULL else num_reqs,
            num_reqs=padded if batch_desc.cg_mode == CUDAGraphMode.FULL else num_reqs,
            uniform_token_count=1,
        )
        return self._build_uniform_attn_metadata(desc, num_reqs, 1, bound, step)
