# SPDX-License-Identifier: Apache-2.0
"""Drafters that forward decode-context-parallel (DCP) rank-local sequence
lengths to the shared metadata helpers."""

from collections.abc import Iterator
from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch
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

from blindobj3 import metadata_shims
from blindobj3.plans import DecodeLoopState

logger = init_logger(__name__)


class TargetLensDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: SG105
    def _query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        # The target already split its lengths across DCP ranks this step.
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )


class AssertedLensDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: clean
    def _query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        if self.dcp_size > 1:
            # The target's split must exist, but it describes the target's
            # lengths; the helper derives the draft's own.
            assert input_batch.dcp_local_seq_lens is not None
            assert input_batch.dcp_local_seq_lens.shape[0] >= num_reqs
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class SharedBufferMTPSpeculator(MTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
        # Reuse the target runner's DCP split instead of relaunching the kernel.
        shared_local_lens = (
            self.target_input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
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
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=shared_local_lens,
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


class ExplicitBufferStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode (decode_attn_md)
    # expect: SG105
    def _decode_metadata(
        self,
        num_reqs: int,
        step: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step + 1,
            dcp_local_seq_lens=(
                self.input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
            ),
        )


class ExplicitNoneStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode (decode_attn_md)
    # expect: clean
    def _decode_metadata(
        self,
        num_reqs: int,
        step: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step + 1,
            # Let the helper split this step's draft lengths itself.
            dcp_local_seq_lens=None,
        )


class CachedLensEagleSpeculator(EagleSpeculator):
    """EAGLE that keeps the prefill's DCP split for its decode steps."""

    _prefill_dcp_local_seq_lens: torch.Tensor | None = None

    def propose(self, input_batch: InputBatch, *args: Any, **kwargs: Any):
        self._prefill_dcp_local_seq_lens = input_batch.dcp_local_seq_lens
        return super().propose(input_batch, *args, **kwargs)

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
                    dcp_local_seq_lens=self._prefill_dcp_local_seq_lens,
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


class MetricsLensEagleSpeculator(EagleSpeculator):
    """EAGLE that reports how unevenly DCP splits the target's context."""

    _target_dcp_local_seq_lens: torch.Tensor | None = None

    def propose(self, input_batch: InputBatch, *args: Any, **kwargs: Any):
        self._target_dcp_local_seq_lens = input_batch.dcp_local_seq_lens
        return super().propose(input_batch, *args, **kwargs)

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode (per-step build)
    # expect: clean
    def _decode_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if step == 1 and self._target_dcp_local_seq_lens is not None:
            local = self._target_dcp_local_seq_lens[:num_reqs].float()
            logger.debug("target DCP split spread: %.1f", float(local.std()))
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class HoistedLensMTPSpeculator(MTPSpeculator):
    """MTP that launches the DCP split kernel once per propose."""

    def _multi_step_decode(
        self,
        num_reqs: int,
        skip_attn: bool,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> None:
        state = DecodeLoopState(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )
        if self.dcp_size > 1 and not skip_attn:
            state.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        self._decode_steps(
            state, skip_attn, num_tokens_across_dp, num_speculative_steps
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode (step loop)
    # expect: SG105
    def _decode_steps(
        self,
        state: DecodeLoopState,
        skip_attn: bool,
        num_tokens_across_dp: torch.Tensor | None,
        num_speculative_steps: int,
    ) -> None:
        num_reqs = state.num_reqs
        batch_desc = state.batch_desc
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
                    seq_lens_cpu_upper_bound=state.seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=state.dcp_local_seq_lens,
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


class FirstStepLensEagleSpeculator(EagleSpeculator):
    """EAGLE that lets the helper split lengths once and keeps that split."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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

        first_step_local_lens: torch.Tensor | None = None
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
                    dcp_local_seq_lens=first_step_local_lens,
                )
                if step == 1 and self.dcp_size > 1:
                    # The helper just split this step's lengths into the
                    # shared buffer; keep a copy for the following steps.
                    first_step_local_lens = self.input_buffers.dcp_local_seq_lens[
                        :num_reqs
                    ].clone()
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


class StreamedTargetLensMTPSpeculator(MTPSpeculator):
    """MTP fed per-step DCP lengths from a stream set up in propose()."""

    _dcp_lens_stream: Iterator[torch.Tensor | None] | None = None

    def propose(self, input_batch: InputBatch, *args: Any, **kwargs: Any):
        self._dcp_lens_stream = metadata_shims.target_local_lens_per_step(
            input_batch, self.num_speculative_steps
        )
        return super().propose(input_batch, *args, **kwargs)

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
        assert self._dcp_lens_stream is not None

        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            step_local_lens = next(self._dcp_lens_stream, None)
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
                    dcp_local_seq_lens=step_local_lens,
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


class KwargsLensMultiModuleMTPSpeculator(MultiModuleMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose (draft_attn_metadata)
    # expect: SG105
    def _draft_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        extra: dict[str, Any] = {}
        if self.dcp_size > 1:
            extra["dcp_local_seq_lens"] = input_batch.dcp_local_seq_lens
        return self._build_attn_metadata(
            num_reqs=input_batch.num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            **extra,
        )


class HelperLensDSparkSpeculator(DSparkSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._dcp_note_logged = False

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (draft_attn_metadata build)
    # expect: clean
    def _query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        extra: dict[str, Any] = {"causal": self._group_causal}
        if self.dcp_size > 1 and not self._dcp_note_logged:
            logger.info(
                "DSpark under DCP (%d ranks): draft lengths are split per step.",
                self.dcp_size,
            )
            self._dcp_note_logged = True
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            **extra,
        )
