# SPDX-License-Identifier: Apache-2.0
"""Drafters carrying the fork's decode-context-parallel (DCP) changes."""

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

import torch

import vllm.v1.worker.gpu.cp_utils as cp_utils
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens as _local_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import (
    MultiModuleMTPSpeculator,
)
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)
from vllm.v1.worker.utils import AttentionGroup

from ._dcp import (
    DcpLocalLenPreparer,
    draft_dcp_local_seq_lens,
    refresh_draft_dcp_local_seq_lens,
    target_seq_lens,
)

logger = init_logger(__name__)


# ---------------------------------------------------------------------------
# Duplicate DCP preparation (SG104-class) variants
# ---------------------------------------------------------------------------


class HandPreparedDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter from before upstream removed DFlash's DCP copy."""

    # idiom: pre-fix DFlashSpeculator.propose: prepare_dcp_local_seq_lens called once in the speculator and its result handed to _build_uniform_attn_metadata(dcp_local_seq_lens=...)
    # expect: SG104
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        dcp_local_seq_lens = None
        if self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class HelperOnlyDSparkSpeculator(DSparkSpeculator):
    """Same drafter after the upstream fix."""

    # idiom: post-fix DFlashSpeculator.propose: DCP left to the shared helper (no dcp_local_seq_lens passed); the speculator only checks the DCP geometry
    # expect: clean
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        if self.dcp_size > 1:
            assert self.block_tables.cp_interleave == 1, (
                "FlashInfer MLA native DCP requires cp_kv_cache_interleave_size=1"
            )
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class PartialPrepEagleSpeculator(EagleSpeculator):
    """EAGLE drafter that refreshes DCP lengths before every draft step."""

    _refresh_dcp: Any = None

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
        if self.dcp_size > 1:
            self._refresh_dcp = partial(
                prepare_dcp_local_seq_lens,
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                dcp_size=self.dcp_size,
                dcp_rank=block_tables.cp_rank,
                cp_interleave=block_tables.cp_interleave,
            )

    # idiom: TargetDependentARSpeculator._multi_step_decode; a functools.partial of prepare_dcp_local_seq_lens stored on self in set_attn and called each draft step before the helper
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
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            if not skip_attn:
                if self._refresh_dcp is not None:
                    self._refresh_dcp(num_reqs)
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
                    None,
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                    num_speculative_steps,
                )


class PropertyPrepMTPSpeculator(MTPSpeculator):
    """MTP drafter exposing the draft's rank-local lengths as a property."""

    _num_live_reqs: int = 0

    @property
    def draft_dcp_local_seq_lens(self) -> torch.Tensor | None:
        if self.dcp_size <= 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            self._num_live_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    # idiom: @property on the speculator that runs prepare_dcp_local_seq_lens; reading it here to hand the lengths to the uniform helper runs the preparation
    # expect: SG104
    def _decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        self._num_live_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            dcp_local_seq_lens=self.draft_dcp_local_seq_lens,
        )


class GeneratorPrepEagleSpeculator(EagleSpeculator):
    """EAGLE drafter whose step loop is a generator that primes DCP state."""

    def _iter_draft_steps(
        self, num_reqs: int, num_speculative_steps: int
    ) -> Iterator[int]:
        for step in range(1, num_speculative_steps):
            if self.dcp_size > 1:
                prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            yield step

    # idiom: TargetDependentARSpeculator._multi_step_decode driven by a generator method (_iter_draft_steps) whose body runs prepare_dcp_local_seq_lens before each yield
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
        for step in self._iter_draft_steps(num_reqs, num_speculative_steps):
            attn_metadata = (
                None
                if skip_attn
                else self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
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


class HelperPrepMTPSpeculator(MTPSpeculator):
    """MTP drafter using the fork's shared DCP refresh helper."""

    # idiom: helper in another module of the tree (_dcp.refresh_draft_dcp_local_seq_lens, which calls prepare_dcp_local_seq_lens) called from the speculator, result handed to the helper
    # expect: SG104
    def _decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        lens = refresh_draft_dcp_local_seq_lens(
            self.input_buffers, self.block_tables, num_reqs, self.dcp_size
        )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            dcp_local_seq_lens=lens,
        )


class HolderPrepDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter with a DCP helper object built in set_attn."""

    _dcp_preparer: DcpLocalLenPreparer | None = None

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
        self._dcp_preparer = DcpLocalLenPreparer(
            self.input_buffers, block_tables, self.dcp_size
        )

    # idiom: holder object (DcpLocalLenPreparer from another module) stored on self; its bound method .refresh() runs prepare_dcp_local_seq_lens before the uniform helper
    # expect: SG104
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        assert self._dcp_preparer is not None
        self._dcp_preparer.refresh(num_reqs)
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class AliasPrepStandaloneSpeculator(StandaloneARSpeculator):
    """Standalone AR drafter with DCP support bolted on."""

    # idiom: StandaloneARSpeculator._multi_step_decode per-step build; prepare_dcp_local_seq_lens imported under an alias (_local_lens) and run inside a walrus condition
    # expect: SG104
    def _decode_step_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        step: int,
    ) -> dict[str, Any] | None:
        dcp_lens = None
        if self.dcp_size > 1 and (
            lens := _local_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        ) is not None:
            dcp_lens = lens
        return self._build_uniform_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
            dcp_local_seq_lens=dcp_lens,
        )


class FinallyPrepEagleSpeculator(EagleSpeculator):
    """EAGLE drafter that re-primes DCP state for the fused refresh."""

    # idiom: TargetDependentARSpeculator._fused_multi_step_decode first build; module-attribute call cp_utils.prepare_dcp_local_seq_lens in a try/finally after the helper, to leave the buffer primed for update_draft_decode_metadata
    # expect: SG104
    def _fused_first_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        try:
            return self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
            )
        finally:
            if self.dcp_size > 1:
                cp_utils.prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )


class FusedRefreshEagleSpeculator(EagleSpeculator):
    """EAGLE drafter using the base's in-place decode metadata refresh."""

    # idiom: TargetDependentARSpeculator._generate_fused_drafts: later steps call the base's own _update_draft_decode_metadata (which owns the DCP recompute for the in-place refresh)
    # expect: clean
    def _refresh_decode_metadata(
        self,
        attn_metadata: dict[str, Any] | None,
        num_reqs: int,
        num_tokens_padded: int,
        step: int,
    ) -> None:
        if attn_metadata is None or not (self.advance_draft_positions or step == 1):
            return
        self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc[: num_reqs + 1],
            self.input_buffers.positions[:num_reqs],
            num_tokens_padded,
        )
        self._update_draft_decode_metadata(attn_metadata, num_reqs)


class ContextPrepDFlash2Speculator(DFlash2Speculator):
    """DFlash2 drafter using the fork's DCP context manager."""

    # idiom: context manager from another module (_dcp.draft_dcp_local_seq_lens, whose body runs prepare_dcp_local_seq_lens) entered with `with ... as lens` around the helper call
    # expect: SG104
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        with draft_dcp_local_seq_lens(
            self.input_buffers, self.block_tables, num_reqs, self.dcp_size
        ) as lens:
            return self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=self.num_query_per_req,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=self.num_query_per_req,
                causal=self._group_causal,
                dcp_local_seq_lens=lens,
            )


class StepCacheDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter that prepares DCP lengths once per propose and caches them."""

    _step_dcp_lens: torch.Tensor | None = None

    # idiom: speculator method running prepare_dcp_local_seq_lens directly and caching the result on self (`_step_dcp_lens: Tensor | None = None`) for later builds
    # expect: SG104
    def _refresh_step_lens(self, num_reqs: int) -> None:
        if self.dcp_size > 1:
            self._step_dcp_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )

    # idiom: value cached on self by another method (_refresh_step_lens, an earlier point of the step) handed to the uniform helper as dcp_local_seq_lens; prepare_dflash_inputs has moved seq_lens since
    # expect: SG105
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=self._step_dcp_lens,
        )


# idiom: module-level function of a speculator module (not a capture builder) that primes the draft DCP buffer for a speculator, called from propose
# expect: SG104
def _prime_draft_dcp_lens(speculator: DFlashSpeculator, num_reqs: int) -> None:
    if speculator.dcp_size <= 1:
        return
    prepare_dcp_local_seq_lens(
        speculator.input_buffers.dcp_local_seq_lens,
        speculator.input_buffers.seq_lens,
        num_reqs,
        speculator.dcp_size,
        speculator.block_tables.cp_rank,
        speculator.block_tables.cp_interleave,
    )


# idiom: dflash/cudagraph.py _prepare_dflash_inputs_to_capture with DCP: capture-time module-level builder preparing dummy DCP lengths and calling build_attn_metadata(for_cudagraph_capture=True)
# expect: clean
def _capture_query_metadata_dcp(
    num_reqs: int,
    num_tokens: int,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
    causal: bool | Mapping[int, bool],
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    slot_mappings = block_tables.get_dummy_slot_mappings(num_tokens)
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
    attn_metadata = build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=num_tokens // num_reqs,
        seq_lens=input_batch.seq_lens,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        max_seq_len=max_model_len,
        block_tables=block_tables.get_dummy_block_tables(num_reqs),
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
        causal=causal,
    )
    return attn_metadata, build_slot_mappings_by_layer(slot_mappings, kv_cache_config)


class DcpAuditMTPSpeculator(MTPSpeculator):
    """MTP drafter with DCP sanity checks (debug builds)."""

    # idiom: speculator reading self.input_buffers.dcp_local_seq_lens only for an assertion/log (no preparation, nothing handed to a build)
    # expect: clean
    def _check_dcp_state(self, num_reqs: int) -> None:
        if self.dcp_size <= 1:
            return
        local = self.input_buffers.dcp_local_seq_lens[:num_reqs]
        assert local.shape[0] == num_reqs
        logger.debug(
            "draft DCP rank %d: %d rows, interleave %d",
            self.block_tables.cp_rank,
            local.shape[0],
            self.block_tables.cp_interleave,
        )


# ---------------------------------------------------------------------------
# Stale DCP lengths (SG105-class) variants
# ---------------------------------------------------------------------------


class BufferLensEagleSpeculator(EagleSpeculator):
    """EAGLE drafter that forwards the runner's DCP buffer to the helper."""

    # idiom: TargetDependentARSpeculator._multi_step_decode handing self.input_buffers.dcp_local_seq_lens (instance state, not recomputed for this step) to the uniform helper
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
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            if not skip_attn:
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=(
                        self.input_buffers.dcp_local_seq_lens
                        if self.dcp_size > 1
                        else None
                    ),
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


class HelperLensEagleSpeculator(EagleSpeculator):
    """Same loop, leaving DCP to the helper."""

    # idiom: kwargs dict for the uniform helper with dcp_local_seq_lens=None written out, so the shared helper recomputes from the draft's seq_lens
    # expect: clean
    def _decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        md_kwargs = dict(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )
        md_kwargs.update(dcp_local_seq_lens=None)
        return self._build_uniform_attn_metadata(**md_kwargs)


class TargetLensMultiMTPSpeculator(MultiModuleMTPSpeculator):
    """Multi-module MTP drafter that reuses the target's DCP lengths."""

    # idiom: MultiModuleMTPSpeculator.propose non-uniform _build_attn_metadata call; kwargs built with dict(...) and .update(dcp_local_seq_lens=input_batch.dcp_local_seq_lens) (the target model's lengths)
    # expect: SG105
    def _draft_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        md_kwargs: dict[str, Any] = dict(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )
        if input_batch.dcp_local_seq_lens is not None:
            # Same requests, same lengths as the target step.
            md_kwargs.update(dcp_local_seq_lens=input_batch.dcp_local_seq_lens)
        return self._build_attn_metadata(**md_kwargs)


class TargetPropertyDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter reading the target runner's DCP buffer via a property."""

    @property
    def _target_dcp_local_seq_lens(self) -> torch.Tensor | None:
        if self.dcp_size <= 1:
            return None
        return self.target_input_buffers.dcp_local_seq_lens

    # idiom: @property returning self.target_input_buffers.dcp_local_seq_lens (the target model runner's buffer from set_attn) handed to the uniform helper
    # expect: SG105
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=self._target_dcp_local_seq_lens,
        )


class CachedLensMTPSpeculator(MTPSpeculator):
    """MTP drafter that keeps the prefill step's DCP lengths for decode."""

    _prefill_dcp_local_seq_lens: torch.Tensor | None = None

    def _remember_prefill_lens(self, input_batch: InputBatch) -> None:
        if input_batch.dcp_local_seq_lens is not None:
            self._prefill_dcp_local_seq_lens = input_batch.dcp_local_seq_lens.clone()

    # idiom: attribute declared `Tensor | None = None`, set from the target's input_batch in another method (_remember_prefill_lens) and read in the decode loop as dcp_local_seq_lens of the helper
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
        for step in range(1, num_speculative_steps):
            attn_metadata = None
            if not skip_attn:
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self._prefill_dcp_local_seq_lens,
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


class UnpackedLensStandaloneSpeculator(StandaloneARSpeculator):
    """Standalone AR drafter with DCP-aware prefill metadata."""

    # idiom: StandaloneARSpeculator._prefill expanded-buffer build (manual NONE BatchExecutionDescriptor); (seq_lens, dcp_lens) tuple-unpacked from a helper in another module that returns the target input_batch's lengths
    # expect: SG105
    def _prefill_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        total_expanded: int,
        prefill_slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        _, dcp_lens = target_seq_lens(input_batch, num_reqs)
        qsl_np = input_batch.query_start_loc_np[: num_reqs + 1] + self.arange_np[
            : num_reqs + 1
        ]
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=total_expanded,
                num_reqs=num_reqs,
            ),
            num_reqs=num_reqs,
            query_start_loc_np=qsl_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=dcp_lens,
            slot_mappings=prefill_slot_mappings,
        )

    # idiom: StandaloneARSpeculator._prefill verbatim shape: manual BatchExecutionDescriptor(cg_mode=NONE, num_tokens=total_expanded) and the expanded query_start_loc; no DCP lengths passed
    # expect: clean
    def _prefill_metadata_upstream(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        total_expanded: int,
        prefill_slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        qsl_np = input_batch.query_start_loc_np
        query_start_loc_cpu_expanded = (
            torch.from_numpy(qsl_np[: num_reqs + 1]).int()
            + torch.from_numpy(self.arange_np[: num_reqs + 1]).int()
        )
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=total_expanded,
                num_reqs=num_reqs,
            ),
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_cpu_expanded.numpy(),
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=prefill_slot_mappings,
        )


class PartialLensEagleSpeculator(EagleSpeculator):
    """EAGLE drafter binding the decode-build arguments once in set_attn."""

    _decode_md: Any = None

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
        self._decode_md = partial(
            self._build_uniform_attn_metadata,
            num_query_per_req=1,
            dcp_local_seq_lens=(
                self.input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
            ),
        )

    # idiom: functools.partial of the shared helper stored in set_attn with dcp_local_seq_lens bound to the InputBuffers buffer; each call hands that instance state (never recomputed) to the helper
    # expect: SG105
    def _decode_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        return self._decode_md(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class ReuseTargetMetadataMTPSpeculator(MTPSpeculator):
    """MTP drafter that reuses the target's metadata for draft prefill."""

    # idiom: TargetDependentARSpeculator.propose draft prefill: the target's attn_metadata/slot_mappings (which carry the target's DCP lengths) are reused as-is; no metadata is built
    # expect: clean
    def _eager_draft_prefill(
        self,
        input_batch: InputBatch,
        attn_metadata: dict[str, Any],
        slot_mappings: dict[str, torch.Tensor],
        prefill_batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
    ) -> None:
        num_reqs = input_batch.num_reqs
        if self.dcp_size > 1:
            assert input_batch.dcp_local_seq_lens is not None
        self.on_prefill_begin(num_reqs)
        self._prefill(
            num_reqs,
            prefill_batch_desc.num_tokens,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp=num_tokens_across_dp,
            cudagraph_runtime_mode=prefill_batch_desc.cg_mode,
        )
        self.on_prefill_end(num_reqs)
