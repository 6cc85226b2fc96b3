"""SG105 (stale DCP-local lengths) and SG104 (duplicate DCP preparation)
cases in draft decode loops."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

from .base import BlindARBase

# ---------------------------------------------------------------------------
# SG105: stale DCP-local lengths
# ---------------------------------------------------------------------------


class TargetLensEagle(BlindARBase):
    """Uses the target batch's DCP lengths recorded by the base class."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture
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
        self.decode_tokens_across_dp = num_tokens_across_dp
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self.target_dcp_local_seq_lens,
                )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class TargetLensStatsEagle(BlindARBase):
    """Reads the target's DCP lengths, but only for a statistic."""

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
        self.decode_tokens_across_dp = num_tokens_across_dp
        target_lens = self.target_dcp_local_seq_lens
        if target_lens is not None:
            self._target_local_kv_tokens = int(target_lens[:num_reqs].sum())
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                # The base helper re-derives the local lengths from this
                # step's global seq_lens.
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class OnceBeforeLoopMTP(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/model_runner.py GPUModelRunner.execute_model
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
        self.decode_tokens_across_dp = num_tokens_across_dp
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
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=dcp_local_seq_lens,
                )
            # _generate_draft advances input_buffers.seq_lens for the next step.
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class CachedOnSelfEagle(BlindARBase):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self._dcp_cache: torch.Tensor | None = None

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/ubatch_utils.py _slice_input_batch
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
        self.decode_tokens_across_dp = num_tokens_across_dp
        self._dcp_cache = None
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                if self._dcp_cache is None and self.dcp_size > 1:
                    # Filled on the first draft step, then reused.
                    self._dcp_cache = prepare_dcp_local_seq_lens(
                        self.input_buffers.dcp_local_seq_lens,
                        self.input_buffers.seq_lens,
                        num_reqs,
                        self.dcp_size,
                        self.block_tables.cp_rank,
                        self.block_tables.cp_interleave,
                    )
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self._dcp_cache,
                )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class InvalidatedCacheEagle(BlindARBase):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
        self._dcp_override: torch.Tensor | None = None

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
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
        self.decode_tokens_across_dp = num_tokens_across_dp
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            # Never carry lengths over from an earlier step: None makes the
            # base helper recompute them from this step's seq_lens.
            self._dcp_override = None
            if not skip_attn:
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self._dcp_override,
                )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class KwargsDcpMTP(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashmla_sparse.py FlashMLASparseMetadataBuilder.build
    # expect: SG105
    def _draft_decode_loop(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> None:
        common = dict(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )
        if self.dcp_size > 1:
            common.update(
                dcp_local_seq_lens=get_dcp_local_seq_lens(
                    input_batch.seq_lens[:num_reqs],
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            )
        slot_mappings = self._decode_slot_mappings(num_reqs, batch_desc.num_tokens)
        for step in range(1, self.num_speculative_steps):
            attn_metadata = self._build_uniform_attn_metadata(step=step, **common)
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )

    # idiom: vllm-project/vllm vllm/v1/attention/backends/mla/flashmla_sparse.py FlashMLASparseMetadataBuilder.build
    # expect: clean
    def _draft_decode_loop_fresh(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> None:
        common = dict(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )
        if self.dcp_size > 1:
            # Recorded as a statistic only; the draft steps leave the local
            # lengths to the base helper.
            target_local = get_dcp_local_seq_lens(
                input_batch.seq_lens[:num_reqs],
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            self._max_target_local = int(target_local.max())
        slot_mappings = self._decode_slot_mappings(num_reqs, batch_desc.num_tokens)
        for step in range(1, self.num_speculative_steps):
            attn_metadata = self._build_uniform_attn_metadata(step=step, **common)
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )


class PartialDcpEagle(BlindARBase):
    def _on_target_batch(self, input_batch: InputBatch) -> None:
        # Bound once per target batch.
        self._step_md = functools.partial(
            self._build_uniform_attn_metadata,
            num_query_per_req=1,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )
        self._fresh_step_md = functools.partial(
            self._build_uniform_attn_metadata, num_query_per_req=1
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata_out_graph
    # expect: SG105
    def _decode_with_partial(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        slot_mappings = self._decode_slot_mappings(num_reqs, batch_desc.num_tokens)
        for step in range(1, self.num_speculative_steps):
            attn_metadata = self._step_md(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.init_forward_metadata_out_graph
    # expect: clean
    def _decode_with_fresh_partial(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        slot_mappings = self._decode_slot_mappings(num_reqs, batch_desc.num_tokens)
        for step in range(1, self.num_speculative_steps):
            attn_metadata = self._fresh_step_md(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
            )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )


class GeneratorDcpMTP(BlindARBase):
    def _steps_with_lens(
        self, num_reqs: int
    ) -> Iterator[tuple[int, torch.Tensor | None]]:
        lens = self._cache_draft_dcp_lens(num_reqs)
        for step in range(1, self.num_speculative_steps):
            yield step, lens

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAMultiStepDraftBackend.common_template
    # expect: SG105
    def _decode_from_generator(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        slot_mappings = self._decode_slot_mappings(num_reqs, batch_desc.num_tokens)
        for step, dcp_lens in self._steps_with_lens(num_reqs):
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=dcp_lens,
            )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )


class FirstStepCacheEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG105
    def _decode_cached_after_first(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> None:
        slot_mappings = self._decode_slot_mappings(num_reqs, batch_desc.num_tokens)
        dcp_lens = None
        for step in range(1, self.num_speculative_steps):
            if step == 1:
                # Base class (base.py) computes and keeps them on self.
                self._cache_draft_dcp_lens(num_reqs)
            dcp_lens = self.target_dcp_local_seq_lens
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=dcp_lens,
            )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                self.num_speculative_steps,
            )


class InPlaceRefreshEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._generate_fused_drafts
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
        for step in range(1, num_speculative_steps):
            if attn_metadata is not None:
                self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, num_tokens_padded
                )
                # Base refresh re-derives the DCP-local lengths every step.
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


# ---------------------------------------------------------------------------
# SG104: duplicate DCP preparation
# ---------------------------------------------------------------------------


class DoublePrepEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
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
        self.decode_tokens_across_dp = num_tokens_across_dp
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                if self.block_tables.cp_size > 1:
                    prepare_dcp_local_seq_lens(
                        self.input_buffers.dcp_local_seq_lens,
                        self.input_buffers.seq_lens,
                        num_reqs,
                        self.block_tables.cp_size,
                        self.block_tables.cp_rank,
                        self.block_tables.cp_interleave,
                    )
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                # dcp_local_seq_lens left as None: the helper prepares again.
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class SinglePrepEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
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
        self.decode_tokens_across_dp = num_tokens_across_dp
        attn_metadata = None
        slot_mappings = None
        for step in range(1, num_speculative_steps):
            if not skip_attn:
                # Prepared here from this step's seq_lens and handed to the
                # helper, which then skips its own preparation.
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
                slot_mappings = self._decode_slot_mappings(
                    num_reqs, batch_desc.num_tokens
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=dcp_local_seq_lens,
                )
            self._run_decode_step(
                num_reqs, batch_desc, attn_metadata, slot_mappings, step,
                num_speculative_steps,
            )


class DoubleUpdateMTP(MTPSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: SG104
    def _update_draft_decode_metadata(
        self, attn_metadata: dict[str, Any], num_reqs: int
    ) -> None:
        if self.dcp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        super()._update_draft_decode_metadata(attn_metadata, num_reqs)


class KernelTableUpdateMTP(MTPSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
    # expect: clean
    def _update_draft_decode_metadata(
        self, attn_metadata: dict[str, Any], num_reqs: int
    ) -> None:
        # The base refresh prepares the DCP-local lengths; this only adds the
        # kernel block-table remap.
        super()._update_draft_decode_metadata(attn_metadata, num_reqs)
        for groups in self.attn_groups:
            for group in groups:
                group.map_to_kernel_block_table(
                    self.block_tables.input_block_tables[group.kv_cache_group_id]
                )


class LocalizeInPlaceEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/attention/backends/utils.py get_dcp_local_seq_lens
    # expect: SG104
    def _local_lens_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if self.dcp_size > 1:
            local = get_dcp_local_seq_lens(
                self.input_buffers.seq_lens[:num_reqs],
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            # Rank-local lengths written back into the global buffer, which
            # the base helper localizes once more.
            self.input_buffers.seq_lens[:num_reqs].copy_(local)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class PartialPrepMTP(BlindARBase):
    def _bind_dcp_prep(self) -> None:
        self._dcp_prep = functools.partial(
            prepare_dcp_local_seq_lens,
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/ubatch_utils.py _slice_input_batch
    # expect: SG104
    def _prepped_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if self.dcp_size > 1:
            self._dcp_prep(
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class QueryPrepDFlash(DFlashSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG104
    def _query_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        if self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
                num_reqs_padded=batch_desc.num_reqs,
            )
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class GraphPrepDFlash(DFlashSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator._prepare_graph_forward
    # expect: clean
    def _prepare_graph_forward(
        self, num_reqs: int, attn_metadata: dict[str, Any] | None
    ) -> None:
        num_context = self._num_graph_context_tokens(num_reqs)
        if self._aux_staging is not None:
            self.hidden_states[:num_context].copy_(
                self.model.combine_hidden_states(self._aux_staging[:num_context])
            )
        self.prepare_context_anchor(
            num_reqs, self.target_input_buffers.query_start_loc, self._num_rejected
        )
        self._precompute_context_kv(0, num_context)
        if attn_metadata is not None and self.supports_decode_metadata_update:
            # Refreshed in place inside the FULL graph; no metadata build (and
            # so no base-helper preparation) happens on this path.
            if self.block_tables.cp_size > 1:
                prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.block_tables.cp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            for groups in self.attn_groups:
                for group in groups:
                    group.update_draft_decode_metadata(attn_metadata)
