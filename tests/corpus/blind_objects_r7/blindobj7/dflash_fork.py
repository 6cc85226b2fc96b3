# SPDX-License-Identifier: Apache-2.0
"""DFlash drafters of the fork.

``ForkDFlashSpeculator`` splits upstream's ``propose`` so that variants only
replace the query-block metadata step.
"""

from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionCGSupport
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import (
    AttentionState,
    BatchExecutionDescriptor,
)
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (
    DFlashSpeculator,
    prepare_dflash_inputs,
)
from vllm.v1.worker.utils import AttentionGroup

logger = init_logger(__name__)


# idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture; module-level capture builder with for_cudagraph_capture=True and its own DCP preparation
# expect: clean
def _prepare_fork_dflash_capture(
    num_reqs: int,
    num_tokens: int,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
    causal: bool | Mapping[int, bool],
) -> AttentionState:
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    input_block_tables = block_tables.get_dummy_block_tables(num_reqs)
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
        block_tables=input_block_tables,
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
        causal=causal,
    )
    return AttentionState(
        attn_metadata, build_slot_mappings_by_layer(slot_mappings, kv_cache_config)
    )


class ForkDFlashSpeculator(DFlashSpeculator):
    _speculator_name = "ForkDFlash"

    def _on_target_batch(self, input_batch: InputBatch) -> None:
        """Hook for variants that stage target-side state before drafting."""
        return None

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose; query-block metadata split into its own method, uniform helper with keyword args
    # expect: clean
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
        if dummy_run and dp_sync_state is not None:
            num_reqs = min(num_reqs, dp_sync_state.num_reqs)
        num_target_tokens = input_batch.num_tokens
        num_query_tokens = num_reqs * self.num_query_per_req
        max_seq_len = input_batch.seq_lens_cpu_upper_bound[:num_reqs].max().item()
        self.draft_max_seq_len = min(
            max_seq_len + self.num_query_per_req, self.max_model_len
        )
        self._on_target_batch(input_batch)

        for i, gid in enumerate(self.draft_kv_cache_group_ids):
            prepare_dflash_inputs(
                self.input_buffers,
                self.block_tables.slot_mappings[gid],
                self.context_positions,
                self._context_slot_mappings[i],
                self.sample_indices,
                self.sample_pos,
                self.sample_idx_mapping,
                self.temperature,
                self.seeds,
                input_batch,
                num_sampled,
                num_rejected,
                last_sampled,
                next_prefill_tokens,
                temperature,
                seeds,
                self.block_tables.input_block_tables[gid],
                self.block_tables.block_sizes[gid],
                self.block_tables.cp_rank,
                self.dcp_size,
                self.block_tables.cp_interleave,
                self.parallel_drafting_token_id,
                self.num_query_per_req,
                self.num_speculative_steps,
                self.max_num_reqs,
                self.max_num_tokens,
                self.max_model_len,
                self.sample_from_anchor,
                num_reqs,
            )

        batch_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(
                dp_sync_state, num_reqs, self.num_query_per_req
            )
            if dp_sync_state is not None
            else (None, num_query_tokens)
        )
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(
            self.query_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=self.num_query_per_req,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=batch_sync,
        )
        num_tokens_padded = batch_desc.num_tokens
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert batch_desc.num_reqs is not None
            self._prepare_graph_replay(
                input_batch,
                batch_desc.num_reqs,
                last_hidden_states,
                aux_hidden_states,
                num_rejected,
                dummy_run,
            )
        else:
            self._store_hidden_states(
                num_target_tokens, last_hidden_states, aux_hidden_states
            )
            self.prepare_context_anchor(
                num_reqs, input_batch.query_start_loc, num_rejected
            )
            self._precompute_context_kv(0, num_target_tokens, dummy_run)

        draft_attn_metadata = self._query_attn_metadata(
            input_batch, batch_desc, num_reqs
        )
        self._prepare_eplb_forward(num_query_tokens)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.query_cudagraph_manager is not None
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._generate_draft(
                num_reqs,
                num_tokens_padded,
                draft_attn_metadata,
                build_slot_mappings_by_layer(
                    self.block_tables.slot_mappings[:, :num_tokens_padded],
                    self.kv_cache_config,
                ),
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]


class GuardedDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (0.28 DFlashSpeculator._build_draft_attn_metadata override); early return when the drafter has no attention layers, else delegate
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
        if not self.draft_attn_layer_names:
            # Attention-free drafters (e.g. the conv-only ablation) need none.
            return None
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class TracedDFlashSpeculator(ForkDFlashSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._cg_mode_counts: Counter[CUDAGraphMode] = Counter()

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; observing override: debug log, profiler range as a with block, unchanged keyword delegation
    # expect: clean
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
        logger.debug(
            "%s draft metadata: mode=%s reqs=%d query_per_req=%d",
            self._speculator_name,
            batch_desc.cg_mode,
            num_reqs,
            num_query_per_req,
        )
        with torch.profiler.record_function("dflash_uniform_attn_metadata"):
            return super()._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=num_query_per_req,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                causal=causal,
                dcp_local_seq_lens=dcp_local_seq_lens,
            )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; observing override that records the mode in a Counter and asserts on the layout
    # expect: clean
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
        self._cg_mode_counts[batch_desc.cg_mode] += 1
        assert query_start_loc_np.shape[0] >= num_reqs + 1
        return super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
            slot_mappings=slot_mappings,
        )


class PrepDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (pre-DCP-fix DFlashSpeculator.propose); rank-local lengths prepared in the subclass and handed to the uniform helper
    # expect: SG104
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        dcp_local_seq_lens = None
        if self.dcp_size > 1:
            # The query block extends every request by num_query_per_req.
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


class TargetLensDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose; target input batch's DCP lengths forwarded to the uniform helper
    # expect: SG105
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        # The query block attends over the context the target just verified,
        # which the target runner already split across DCP ranks.
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )


class DirectDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (0.28 DFlashSpeculator.propose building its own metadata); sink reached through a local alias, FULL-aware count
    # expect: SG101
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        build = build_attn_metadata
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs * self.num_query_per_req
        )
        query_start_loc_cpu = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        query_start_loc_cpu[: num_reqs + 1] = torch.from_numpy(
            self.arange_np[: num_reqs + 1] * self.num_query_per_req
        )
        query_start_loc_cpu[num_reqs:] = query_start_loc_cpu[num_reqs]
        return build(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=self.num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=self._group_causal,
        )


class PartialDFlashSpeculator(ForkDFlashSpeculator):
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
        self._refresh_dcp_lens = (
            partial(
                prepare_dcp_local_seq_lens,
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                dcp_size=self.dcp_size,
                dcp_rank=block_tables.cp_rank,
                cp_interleave=block_tables.cp_interleave,
            )
            if self.dcp_size > 1
            else None
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose; functools.partial stored on the instance in set_attn, called per step
    # expect: SG104
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        refresh = self._refresh_dcp_lens
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=(
                refresh(num_reqs=num_reqs) if refresh is not None else None
            ),
        )


class MaskedDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; override inside a profiler with-block that substitutes the per-group causal map
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
        with torch.profiler.record_function("dflash_draft_attn_metadata"):
            # Every DFlash build must use the drafter's per-group causality.
            return super()._build_attn_metadata(
                num_reqs,
                batch_desc,
                query_start_loc_np,
                seq_lens_cpu_upper_bound,
                step,
                causal=self._group_causal,
                dcp_local_seq_lens=dcp_local_seq_lens,
                slot_mappings=slot_mappings,
            )


class RaisingDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; override that refuses an unsupported configuration, else positional delegation
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
        if self.dcp_size > 1 and self.requires_non_causal:
            raise NotImplementedError(
                "Non-causal DFlash drafting under DCP requires FlashInfer MLA."
            )
        return super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
            slot_mappings,
        )


class ProfiledDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/attn_utils.py get_attn_cg_support inside DFlashSpeculator.init_cudagraph_manager; builder queried for CUDA graph support, min() with a lambda key
    # expect: clean
    def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode) -> None:
        supports = [
            group.get_metadata_builder().get_cudagraph_support(
                self.vllm_config, group.kv_cache_spec
            )
            for groups in self.attn_groups
            for group in groups
        ]
        weakest = min(
            supports, key=lambda s: s.value, default=AttentionCGSupport.ALWAYS
        )
        if weakest.value < AttentionCGSupport.UNIFORM_BATCH.value:
            logger.info(
                "%s draft attention cannot replay uniform batches; running eagerly.",
                self._speculator_name,
            )
            cudagraph_mode = CUDAGraphMode.NONE
        super().init_cudagraph_manager(cudagraph_mode)


class CaptureDFlashSpeculator(ForkDFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture as a speculator method; capture-time build with for_cudagraph_capture=True
    # expect: clean
    def _capture_attn_state(self, desc: BatchExecutionDescriptor) -> AttentionState:
        assert desc.cg_mode == CUDAGraphMode.FULL
        # DCP capture goes through _prepare_fork_dflash_capture.
        assert self.dcp_size == 1
        num_tokens = desc.num_tokens
        num_reqs = desc.num_reqs or min(num_tokens, self.max_num_reqs)
        input_batch = InputBatch.make_dummy(num_reqs, num_tokens, self.input_buffers)
        slot_mappings = self.block_tables.get_dummy_slot_mappings(num_tokens)
        attn_metadata = build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
            max_query_len=self.num_query_per_req,
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=self.block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            for_cudagraph_capture=True,
            causal=self._group_causal,
        )
        return AttentionState(
            attn_metadata,
            build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config),
        )
