# SPDX-License-Identifier: Apache-2.0
"""Autoregressive (EAGLE-style) drafters of the fork.

``LegacyEagleSpeculator`` still runs on the fork's 0.28-style base and its
``_build_draft_attn_metadata``; the other drafters extend upstream's
``EagleSpeculator`` and replace its decode loops.
"""

from collections.abc import Iterator
from typing import Any

import torch

from vllm.config import VllmConfig
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
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.utils import load_eagle_model
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils import (
    SpeculatorCudaGraphManager,
)
from vllm.v1.worker.utils import AttentionGroup

from ._dcp_utils import DCPRefreshMixin
from .fork_base import ForkDraftSpeculatorBase

logger = init_logger(__name__)


class LegacyEagleSpeculator(ForkDraftSpeculatorBase):
    """EAGLE drafter on the fork's legacy base (one token per decode step)."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.hidden_size = self.draft_model_config.get_hidden_size()
        self.dtype = vllm_config.model_config.dtype
        self.hidden_states = torch.zeros(
            self.max_num_tokens, self.hidden_size, dtype=self.dtype, device=device
        )
        self.positions = torch.zeros(
            self.max_num_reqs, dtype=torch.int64, device=device
        )
        self.current_draft_step = torch.tensor(0, dtype=torch.int64, device=device)
        self.decode_cudagraph_manager: SpeculatorCudaGraphManager | None = None

    def load_draft_model(
        self, target_model: torch.nn.Module, target_attn_layer_names: set[str]
    ) -> torch.nn.Module:
        return load_eagle_model(target_model, self.vllm_config)

    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        if cudagraph_mode.decode_mode() == CUDAGraphMode.FULL:
            cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY
        else:
            cudagraph_mode = CUDAGraphMode.NONE
        self.decode_cudagraph_manager = SpeculatorCudaGraphManager(
            self.vllm_config, self.device, cudagraph_mode, decode_query_len=1
        )

    def capture(self) -> None:
        assert self.decode_cudagraph_manager is not None
        self.decode_cudagraph_manager.capture(
            self._generate_draft,
            self.model_state,
            self.input_buffers,
            self.block_tables,
            self.attn_groups,
            self.kv_cache_config,
            progress_bar_desc="Capturing legacy EAGLE decode CUDA graphs",
        )

    def _on_prefill_batch(self, input_batch: InputBatch) -> None:
        return None

    @torch.inference_mode()
    def _generate_draft(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE,
    ) -> None:
        with set_forward_context(
            attn_metadata,
            self.vllm_config,
            num_tokens=num_tokens_padded,
            cudagraph_runtime_mode=cudagraph_runtime_mode,
            num_tokens_across_dp=num_tokens_across_dp,
            slot_mapping=slot_mappings,
            batch_descriptor=BatchDescriptor(num_tokens=num_tokens_padded),
        ):
            hidden_states = self.model(
                input_ids=self.input_buffers.input_ids[:num_tokens_padded],
                positions=self.input_buffers.positions[:num_tokens_padded],
                hidden_states=self.hidden_states[:num_tokens_padded],
            )
        logits = self.model.compute_logits(hidden_states[:num_reqs])
        step = int(self.current_draft_step.item())
        self.draft_tokens[:num_reqs, step] = logits.argmax(dim=-1)
        self.hidden_states[:num_reqs] = hidden_states[:num_reqs]

    def _advance_inputs(self, num_reqs: int, step: int) -> None:
        self.input_buffers.input_ids[:num_reqs] = self.draft_tokens[
            :num_reqs, step - 1
        ].int()
        torch.clamp(
            self.input_buffers.positions[:num_reqs] + 1,
            max=self.max_model_len - 1,
            out=self.input_buffers.positions[:num_reqs],
        )
        torch.clamp(
            self.input_buffers.seq_lens[:num_reqs] + 1,
            max=self.max_model_len,
            out=self.input_buffers.seq_lens[:num_reqs],
        )

    @torch.inference_mode()
    def propose(
        self,
        input_batch: InputBatch,
        attn_metadata: dict[str, Any],
        slot_mappings: dict[str, torch.Tensor],
        last_hidden_states: torch.Tensor,
        aux_hidden_states: list[torch.Tensor] | None,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        last_sampled: torch.Tensor,
        next_prefill_tokens: torch.Tensor,
        temperature: torch.Tensor,
        seeds: torch.Tensor,
        dp_sync_state: DPSyncState | None = None,
        dummy_run: bool = False,
        skip_attn_for_dummy_run: bool = False,
        mm_inputs: tuple[list[torch.Tensor], torch.Tensor] | None = None,
        is_profile: bool = False,
        num_speculative_tokens: int | None = None,
    ) -> torch.Tensor:
        num_reqs = input_batch.num_reqs
        self._on_prefill_batch(input_batch)
        self.hidden_states[: input_batch.num_tokens].copy_(last_hidden_states)
        # Draft prefill reuses the target's metadata: same shape and KV layout.
        self.current_draft_step.fill_(0)
        self._generate_draft(
            num_reqs,
            input_batch.num_tokens_after_padding,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp=None,
        )
        if self.num_speculative_steps == 1:
            return self.draft_tokens[:num_reqs]

        self.input_buffers.query_start_loc[: num_reqs + 1].copy_(
            torch.arange(num_reqs + 1, device=self.device, dtype=torch.int32)
        )
        self.input_buffers.seq_lens[:num_reqs].copy_(
            input_batch.seq_lens[:num_reqs] - num_rejected[:num_reqs].int()
        )
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_reqs,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
        )
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        self._multi_step_decode(
            num_reqs,
            dummy_run and skip_attn_for_dummy_run,
            batch_desc,
            num_tokens_across_dp,
            input_batch.seq_lens_cpu_upper_bound,
            self.num_speculative_steps,
        )
        return self.draft_tokens[:num_reqs]

    # idiom: vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py (0.28 _multi_step_decode); loop over draft steps, legacy helper fed the dispatched descriptor's count before the FULL branch
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
        query_start_loc = self.input_buffers.query_start_loc[: num_reqs + 1]
        positions = self.input_buffers.positions[:num_reqs]
        idx_mapping = self.idx_mapping[:num_reqs]
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            self._advance_inputs(num_reqs, step)
            if not skip_attn:
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                attn_metadata = self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_reqs_padded=batch_desc.num_reqs or num_reqs,
                    num_tokens_padded=batch_desc.num_tokens,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    num_query_per_req=1,
                    causal=True,
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
                )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode; FULL replay returns early, eager path builds with the real request count
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
        if not skip_attn:
            # One query token per request: the real count is num_reqs.
            attn_metadata = self._build_draft_attn_metadata(
                num_reqs=num_reqs,
                num_reqs_padded=num_reqs,
                num_tokens_padded=num_reqs,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
                num_query_per_req=1,
                causal=True,
            )
        slot_mappings_by_layer = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, : batch_desc.num_tokens],
            self.kv_cache_config,
        )
        for step in range(1, num_speculative_steps):
            self._advance_inputs(num_reqs, step)
            self.current_draft_step.fill_(step)
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose on the legacy helper; conditional expression picks the padded count only for FULL
    # expect: clean
    def _rebuild_prefill_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=(batch_desc.num_reqs or num_reqs) if is_full else num_reqs,
            num_tokens_padded=(
                batch_desc.num_tokens if is_full else input_batch.num_tokens
            ),
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            causal=True,
            query_start_loc_np=input_batch.query_start_loc_np,
        )


class SyncedEagleSpeculator(LegacyEagleSpeculator):
    # idiom: vllm/v1/worker/gpu/dp_utils.py DPSyncState.num_tokens_across_dp fed into the legacy _multi_step_decode; per-rank DP counts reduced with max() for the eager build
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
        # Every DP rank builds the same width so the MoE all-to-all lines up.
        num_tokens = (
            int(num_tokens_across_dp.max())
            if num_tokens_across_dp is not None
            else num_reqs
        )
        for step in range(1, num_speculative_steps):
            self._advance_inputs(num_reqs, step)
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
                continue
            attn_metadata = None
            if not skip_attn:
                attn_metadata = self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_reqs_padded=num_reqs,
                    num_tokens_padded=num_tokens,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    num_query_per_req=1,
                    causal=True,
                )
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                build_slot_mappings_by_layer(
                    self.block_tables.slot_mappings[:, : batch_desc.num_tokens],
                    self.kv_cache_config,
                ),
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
            )


class StoredPaddingEagleSpeculator(LegacyEagleSpeculator):
    def _on_prefill_batch(self, input_batch: InputBatch) -> None:
        # Decode steps reuse the prefill's padded width for their slot rows.
        self._num_tokens_padded = input_batch.num_tokens_after_padding

    # idiom: vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py (0.28 _multi_step_decode); count stored on self by another method, read in the non-FULL branch
    # expect: SG103
    def _draft_step_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = self._num_tokens_padded
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            num_query_per_req=1,
            causal=True,
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
        for step in range(1, num_speculative_steps):
            self._advance_inputs(num_reqs, step)
            attn_metadata = (
                None
                if skip_attn
                else self._draft_step_metadata(
                    num_reqs, batch_desc, seq_lens_cpu_upper_bound, step
                )
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
                    num_tokens_across_dp=num_tokens_across_dp,
                    cudagraph_runtime_mode=batch_desc.cg_mode,
                )


class StaleLensEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode; lengths picked once before the step loop by a conditional expression
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
        dcp_local_seq_lens = (
            self.input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
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
                    dcp_local_seq_lens=dcp_local_seq_lens,
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


class StepPrepEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode; DCP preparation inside the per-step loop, result handed to the uniform helper
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
        idx_mapping = self.idx_mapping[:num_reqs]
        attn_metadata = None
        slot_mappings_by_layer = None
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings = self.block_tables.compute_slot_mappings(
                    idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                )
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    slot_mappings, self.kv_cache_config
                )
                dcp_local_seq_lens = None
                if self.block_tables.cp_size > 1:
                    # seq_lens advanced after the previous step's sample.
                    dcp_local_seq_lens = prepare_dcp_local_seq_lens(
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
                    dcp_local_seq_lens=dcp_local_seq_lens,
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


class PlainEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode; per-step rebuild, walrus on the graph manager, DCP left to the shared helper
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
        for step in range(1, num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                slot_mappings_by_layer = build_slot_mappings_by_layer(
                    self.block_tables.compute_slot_mappings(
                        idx_mapping, query_start_loc, positions, batch_desc.num_tokens
                    ),
                    self.kv_cache_config,
                )
                attn_metadata = self._build_uniform_attn_metadata(
                    num_reqs=num_reqs,
                    batch_desc=batch_desc,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                )
            self.current_draft_step.fill_(step)
            if (
                manager := self.decode_cudagraph_manager
            ) is not None and batch_desc.cg_mode == CUDAGraphMode.FULL:
                manager.run_fullgraph(batch_desc)
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


class MixinEagleSpeculator(DCPRefreshMixin, EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode; DCP refresh inherited from a mixin in another module
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
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return
        attn_metadata = None
        slot_mappings_by_layer = None
        if not skip_attn:
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                self.block_tables.compute_slot_mappings(
                    self.idx_mapping[:num_reqs],
                    self.input_buffers.query_start_loc[: num_reqs + 1],
                    self.input_buffers.positions[:num_reqs],
                    batch_desc.num_tokens,
                ),
                self.kv_cache_config,
            )
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
                dcp_local_seq_lens=self._refresh_local_lens(num_reqs),
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


class GeneratorEagleSpeculator(EagleSpeculator):
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
        self._target_dcp_lens = (
            target_input_buffers.dcp_local_seq_lens
            if block_tables.cp_size > 1
            else None
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode; generator yielding per-step metadata, lengths read from an attribute set in set_attn
    # expect: SG105
    def _iter_step_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        num_speculative_steps: int,
    ) -> Iterator[tuple[int, dict[str, Any] | None]]:
        for step in range(1, num_speculative_steps):
            yield step, self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=self._target_dcp_lens,
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
        slot_mappings_by_layer = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, : batch_desc.num_tokens],
            self.kv_cache_config,
        )
        for step, attn_metadata in self._iter_step_metadata(
            num_reqs, batch_desc, seq_lens_cpu_upper_bound, num_speculative_steps
        ):
            self.current_draft_step.fill_(step)
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                assert self.decode_cudagraph_manager is not None
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
                continue
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                None if skip_attn else attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
                num_speculative_steps=num_speculative_steps,
            )


class StaticLensEagleSpeculator(EagleSpeculator):
    # idiom: vllm/v1/worker/gpu/cp_utils.py prepare_dcp_local_seq_lens wrapped as a speculator staticmethod
    # expect: SG104
    @staticmethod
    def _local_lens(
        input_buffers: InputBuffers, block_tables: BlockTables, num_reqs: int
    ) -> torch.Tensor | None:
        if block_tables.cp_size == 1:
            return None
        return prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_buffers.seq_lens,
            num_reqs,
            block_tables.cp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
        )

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
        if not skip_attn:
            attn_metadata = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=1,
                dcp_local_seq_lens=self._local_lens(
                    self.input_buffers, self.block_tables, num_reqs
                ),
            )
        self._generate_fused_drafts(
            num_reqs,
            batch_desc.num_tokens,
            attn_metadata,
            None,
            num_tokens_across_dp,
            batch_desc.cg_mode,
            num_speculative_steps,
        )
