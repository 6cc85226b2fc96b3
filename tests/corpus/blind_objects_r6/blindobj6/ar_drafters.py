# SPDX-License-Identifier: Apache-2.0
"""Autoregressive drafters (Eagle / MTP / target-dependent AR) in the fork.

Each class overrides one piece of ``TargetDependentARSpeculator``'s draft
decode loop (``_multi_step_decode`` / ``_fused_multi_step_decode``).
"""

import itertools
from collections.abc import Iterator
from functools import partial
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import (
    MultiModuleMTPSpeculator,
)
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator import (
    TargetDependentARSpeculator,
)
from vllm.v1.worker.utils import AttentionGroup

from ._ar_step import DecodeStepMixin
from ._dcp_support import (
    DcpLensTracker,
    DcpLensView,
    DcpRefreshMixin,
    dcp_local_lens_scope,
    iter_dcp_local_lens,
    iter_decode_steps,
    snapshot_lens,
)

logger = init_logger(__name__)


# ---------------------------------------------------------------------------
# SG103: padded counts reaching the uniform helper.
# ---------------------------------------------------------------------------
class SplitDispatchEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    """Eagle whose propose patch dispatches prefill and decode up front."""

    # idiom: TargetDependentARSpeculator.propose's two descriptors (prefill_batch_desc / decode_batch_desc); the padded-request guard tests the prefill descriptor while the decode one is built
    # expect: SG103
    def _decode_metadata(
        self,
        prefill_desc: BatchExecutionDescriptor,
        decode_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        # A FULL prefill replay means the batch is a pure decode batch, so the
        # decode graph is padded the same way.
        if prefill_desc.cg_mode == CUDAGraphMode.FULL:
            num_meta_reqs = decode_desc.num_reqs or num_reqs
        else:
            num_meta_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=decode_desc,
            num_reqs=num_meta_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class DescTableEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    """Same propose patch; descriptors kept in a dict keyed by phase."""

    # idiom: TargetDependentARSpeculator.propose's prefill/decode descriptors held in a dict; padding keyed on the decode descriptor's own FULL mode before _build_uniform_attn_metadata
    # expect: clean
    def _decode_metadata(
        self,
        descs: dict[str, BatchExecutionDescriptor],
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        desc = descs["decode"]
        if desc.cg_mode == CUDAGraphMode.FULL and desc.num_reqs:
            num_meta_reqs = desc.num_reqs
        else:
            num_meta_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_meta_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class ConfigGuardMTPSpeculator(DecodeStepMixin, MTPSpeculator):
    # idiom: TargetDependentARSpeculator.init_cudagraph_manager's cudagraph_mode.decode_mode() == FULL (a configuration check) reused in _multi_step_decode to pick the graph's request count
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
        cg_mode = self.vllm_config.compilation_config.cudagraph_mode
        full_decode = cg_mode.decode_mode() == CUDAGraphMode.FULL
        meta_reqs = (batch_desc.num_reqs or num_reqs) if full_decode else num_reqs

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=meta_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class DPAlignedEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    def _iter_decode_steps(
        self,
        num_reqs: int,
        num_tokens_across_dp: torch.Tensor | None,
        num_speculative_steps: int,
    ) -> Iterator[tuple[int, int]]:
        # One token per request per decode step, so the DP-synced token count
        # is the request count every rank runs with.
        synced = (
            num_reqs
            if num_tokens_across_dp is None
            else int(num_tokens_across_dp.max())
        )
        for step in range(1, num_speculative_steps):
            yield step, synced

    # idiom: dp_utils.sync_cudagraph_and_dp_padding's num_tokens_across_dp max, yielded per draft step by a generator method and used as the uniform helper's num_reqs
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step, step_reqs in self._iter_decode_steps(
            num_reqs, num_tokens_across_dp, num_speculative_steps
        ):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=step_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class PartialStepMTPSpeculator(DecodeStepMixin, MTPSpeculator):
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
        self._decode_builder = partial(
            self._build_uniform_attn_metadata, num_query_per_req=1
        )

    # idiom: FastPrefillHelper.prepare's min(desc.num_tokens, self.max_num_tokens) clamp of a padded count, passed as num_reqs through a functools.partial of the uniform helper stored in set_attn
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
        meta_reqs = min(batch_desc.num_reqs or num_reqs, self.max_num_reqs)
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._decode_builder(
                    batch_desc=batch_desc,
                    num_reqs=meta_reqs,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class PartialCleanEagleSpeculator(DecodeStepMixin, EagleSpeculator):
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
        # Bind what never changes per step; the helper owns DCP lengths.
        self._decode_builder = partial(
            self._build_uniform_attn_metadata,
            num_query_per_req=1,
            dcp_local_seq_lens=None,
        )

    # idiom: TargetDependentARSpeculator._multi_step_decode through a functools.partial of the shared uniform helper stored in set_attn (real num_reqs, no lengths bound)
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._decode_builder(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


# ---------------------------------------------------------------------------
# SG104: the drafter runs the DCP preparation itself.
# ---------------------------------------------------------------------------
class LambdaDcpEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    # idiom: speculator.py's DCP recompute (prepare_dcp_local_seq_lens on input_buffers) wrapped in a lambda closure chosen by a conditional expression and called in the draft-step loop
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
        bt = self.block_tables
        refresh = (
            (
                lambda n: prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    n,
                    self.dcp_size,
                    bt.cp_rank,
                    bt.cp_interleave,
                )
            )
            if self.dcp_size > 1
            else (lambda n: None)
        )
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=refresh(num_reqs),
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class ViewDcpMTPSpeculator(DecodeStepMixin, MTPSpeculator):
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
        self._dcp_view = DcpLensView(self.input_buffers, block_tables, self.dcp_size)

    # idiom: DCP lengths read from a holder object's @property (DcpLensView.local_seq_lens, which runs prepare_dcp_local_seq_lens) stored on self in set_attn
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
        view = self._dcp_view
        view.num_reqs = num_reqs
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=view.local_seq_lens,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class GenDcpEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    # idiom: per-step DCP recompute from a generator in another module (iter_dcp_local_lens yields prepare_dcp_local_seq_lens results), zipped with the draft steps
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
        lens_iter = (
            iter_dcp_local_lens(
                self.input_buffers,
                self.block_tables,
                num_reqs,
                num_speculative_steps - 1,
            )
            if self.dcp_size > 1
            else itertools.repeat(None)
        )
        attn_metadata = None
        slot_mappings_by_layer = None
        for step, dcp_lens in zip(range(1, num_speculative_steps), lens_iter):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=dcp_lens,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class StepGenEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    # idiom: TargetDependentARSpeculator._multi_step_decode driven by a generator from the same helper module (iter_decode_steps yields step indices only; no DCP work)
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in iter_decode_steps(num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class TrackerDcpMTPSpeculator(MTPSpeculator):
    _dcp_tracker: DcpLensTracker | None = None

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
            self._dcp_tracker = DcpLensTracker(self.input_buffers, block_tables)

    # idiom: TargetDependentARSpeculator._fused_multi_step_decode with a helper object (DcpLensTracker.refresh runs prepare_dcp_local_seq_lens) fetched by walrus; the result is not even handed on
    # expect: SG104
    def _fused_multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        if (tracker := self._dcp_tracker) is not None and not skip_attn:
            tracker.refresh(num_reqs)
        super()._fused_multi_step_decode(
            num_reqs,
            skip_attn,
            batch_desc,
            num_tokens_across_dp,
            seq_lens_cpu_upper_bound,
            num_speculative_steps,
        )


class TrackerResetEagleSpeculator(EagleSpeculator):
    _dcp_tracker: DcpLensTracker | None = None

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
            self._dcp_tracker = DcpLensTracker(self.input_buffers, block_tables)

    # idiom: same helper object as the DCP tracker, but only its reset() (zero the padded tail for graph replay) is called by walrus before the upstream fused decode
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
        if (tracker := self._dcp_tracker) is not None:
            tracker.reset(num_reqs)
        super()._fused_multi_step_decode(
            num_reqs,
            skip_attn,
            batch_desc,
            num_tokens_across_dp,
            seq_lens_cpu_upper_bound,
            num_speculative_steps,
        )


class MixinDcpEagleSpeculator(DcpRefreshMixin, DecodeStepMixin, EagleSpeculator):
    # idiom: DCP recompute inherited from a mixin in another module (DcpRefreshMixin._refresh_draft_local_lens) and handed to the uniform helper each draft step
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                local_lens = self._refresh_draft_local_lens(num_reqs)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=local_lens,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class LoggedLensEagleSpeculator(DcpRefreshMixin, DecodeStepMixin, EagleSpeculator):
    # idiom: same mixin, but only its read-only _log_draft_local_lens is used, after the helper built (and recomputed) the step's metadata
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
                if self.dcp_size > 1 and logger.isEnabledFor(10):
                    logger.debug(
                        "draft step %d local lens %s",
                        step,
                        self._log_draft_local_lens(num_reqs),
                    )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class ScopedDcpMTPSpeculator(DecodeStepMixin, MTPSpeculator):
    # idiom: DCP recompute run by a contextlib.contextmanager from another module (dcp_local_lens_scope) around the decode loop, its yielded lengths handed to the helper
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                with dcp_local_lens_scope(
                    self.input_buffers, self.block_tables, num_reqs
                ) as local_lens:
                    attn_metadata = self._build_uniform_attn_metadata(
                        num_reqs=num_reqs,
                        batch_desc=batch_desc,
                        num_query_per_req=1,
                        seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                        step=step,
                        dcp_local_seq_lens=local_lens,
                    )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


# ---------------------------------------------------------------------------
# SG105: stale rank-local lengths handed to the helper.
# ---------------------------------------------------------------------------
class StickyLensEagleSpeculator(DecodeStepMixin, EagleSpeculator):
    # Declared here, set (under DCP only) by the decode-begin hook.
    _draft_dcp_lens: torch.Tensor | None = None

    def on_multi_step_decode_begin(self, num_reqs: int) -> None:
        super().on_multi_step_decode_begin(num_reqs)
        if self.dcp_size > 1:
            self._draft_dcp_lens = self.input_buffers.dcp_local_seq_lens[:num_reqs]

    # idiom: lifecycle hook on_multi_step_decode_begin caching input_buffers.dcp_local_seq_lens in a class-declared attribute, read back in _multi_step_decode for every draft step
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self._draft_dcp_lens,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class BoundLensMTPSpeculator(DecodeStepMixin, MTPSpeculator):
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
        self._uniform_decode_md = partial(
            self._build_uniform_attn_metadata,
            num_query_per_req=1,
            dcp_local_seq_lens=(
                target_input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
            ),
        )

    # idiom: the target runner's InputBuffers.dcp_local_seq_lens bound into a functools.partial of the uniform helper in set_attn, called per draft step
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
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings_by_layer = self._decode_slot_mappings(num_reqs, batch_desc)
                attn_metadata = self._uniform_decode_md(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                step,
                num_reqs,
                batch_desc,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                num_speculative_steps,
            )


class SnapshotEagleSpeculator(EagleSpeculator):
    # idiom: TargetDependentARSpeculator._fused_multi_step_decode with tuple unpacking of a (seq_lens, dcp_local_seq_lens) snapshot of the draft buffers from another module, handed to the helper unrefreshed
    # expect: SG105
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
        _, local_lens = snapshot_lens(self.input_buffers)
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
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
                dcp_local_seq_lens=local_lens if self.dcp_size > 1 else None,
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


class LensSourceMTPSpeculator(MultiModuleMTPSpeculator):
    """Multi-module MTP whose DCP length source is configurable per deployment
    (``"target"`` reuses the target's lengths, ``"draft"`` lets the helper
    recompute)."""

    _dcp_lens_source: str = "target"

    # idiom: MultiModuleMTPSpeculator.propose's non-uniform _build_attn_metadata(query_start_loc_np=input_batch.query_start_loc_np), lengths chosen by a match statement whose "target" arm passes InputBatch.dcp_local_seq_lens
    # expect: SG105
    def _mtp_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        match self._dcp_lens_source:
            case "target":
                local_lens = input_batch.dcp_local_seq_lens
            case _:
                local_lens = None
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=local_lens,
        )


# ---------------------------------------------------------------------------
# SG101: the drafter drives the sink / a builder itself.
# ---------------------------------------------------------------------------
class PartialSinkEagleSpeculator(DecodeStepMixin, EagleSpeculator):
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
        self._build_decode_md = partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=kv_cache_config,
            max_query_len=1,
        )

    # idiom: attn_utils.build_attn_metadata bound with functools.partial in set_attn (as sample_draft binds draft_watermarker.sample) and called per decode step
    # expect: SG101
    def _decode_step_metadata(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any]:
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        upper = (seq_lens_cpu_upper_bound[:num_reqs] + step).clamp_(
            max=self.max_model_len
        )
        return self._build_decode_md(
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            seq_lens_cpu_upper_bound=upper,
        )


class PropertyBuilderMTPSpeculator(DecodeStepMixin, MTPSpeculator):
    @property
    def _decode_builder(self) -> Any:
        gid = next(gid for gid, groups in enumerate(self.attn_groups) if groups)
        return self.attn_groups[gid][0].get_metadata_builder()

    # idiom: AttentionGroup.get_metadata_builder() exposed through an @property and its .build(common_prefix_len, common_attn_metadata) called for the draft decode step
    # expect: SG101
    def _rebuild_decode(self, common: CommonAttentionMetadata) -> Any:
        return self._decode_builder.build(
            common_prefix_len=0, common_attn_metadata=common
        )


class CaptureRefreshEagleSpeculator(DecodeStepMixin, TargetDependentARSpeculator):
    """Re-stages capture-time decode metadata for groups whose builders keep
    persistent buffers (FA3 scheduler metadata) before the decode capture."""

    # idiom: build_attn_metadata's capture branch (attn_group.build_metadata_for_cudagraph_capture) run by the drafter for each group at capture time only
    # expect: clean
    def _capture_decode_metadata(
        self, common: CommonAttentionMetadata
    ) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                built = group.build_metadata_for_cudagraph_capture(common)
                metadata.update(dict.fromkeys(group.layer_names, built))
        return metadata

    def capture(self) -> None:
        super().capture()
        logger.debug("%s: decode capture metadata restaged", type(self).__name__)
