# SPDX-License-Identifier: Apache-2.0
"""Multi-module MTP drafters of the fork.

``ForkMTPSpeculator`` factors the draft metadata step of upstream's
``MultiModuleMTPSpeculator.propose`` into ``_build_step_metadata``.
"""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import (
    MultiModuleMTPSpeculator,
    pad_trailing_draft_slots,
)
from vllm.v1.worker.utils import get_uniform_decode_token_count

from ._dcp_utils import DCPLocalLens
from ._metadata_utils import build_draft_metadata

logger = init_logger(__name__)


class ForkMTPSpeculator(MultiModuleMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose; non-uniform helper with the target's query layout
    # expect: clean
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
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
        seq_lens_cpu_upper_bound = input_batch.seq_lens_cpu_upper_bound
        max_seq_len = seq_lens_cpu_upper_bound[:num_reqs].max().item()
        self.draft_max_seq_len = min(max_seq_len, self.max_model_len)
        self._copy_request_inputs(
            num_reqs, input_batch.idx_mapping, temperature, seeds, dummy_run=dummy_run
        )
        num_tokens = input_batch.num_tokens
        max_query_len = input_batch.num_scheduled_tokens.max()
        self.input_buffers.query_start_loc[: num_reqs + 1].copy_(
            input_batch.query_start_loc[: num_reqs + 1]
        )
        self._prepare_inputs(
            last_hidden_states,
            input_batch,
            num_tokens,
            max_query_len,
            num_sampled,
            num_rejected,
            last_sampled,
            next_prefill_tokens,
            mm_inputs,
        )
        uniform_token_count = get_uniform_decode_token_count(
            num_reqs, num_tokens, max_query_len, input_batch.decode_graph_eligible
        )
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(
            self.cudagraph_manager,
            num_reqs,
            input_batch.num_tokens_after_padding,
            uniform_token_count,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=dp_sync_state,
        )
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        if not (dummy_run and skip_attn_for_dummy_run):
            slot_mappings_tensor = self.block_tables.compute_slot_mappings(
                self.idx_mapping[:num_reqs],
                self.input_buffers.query_start_loc,
                self.input_buffers.positions,
                batch_desc.num_tokens,
            )
            pad_trailing_draft_slots(
                slot_mappings_tensor,
                self.input_buffers.query_start_loc,
                self.last_token_indices[:num_reqs],
                num_reqs,
            )
            slot_mappings = build_slot_mappings_by_layer(
                slot_mappings_tensor, self.kv_cache_config
            )
            draft_attn_metadata = self._build_step_metadata(
                input_batch, batch_desc, num_reqs
            )
            assert draft_attn_metadata is not None
            attn_metadata = draft_attn_metadata

        self._prepare_eplb_forward(num_tokens)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.cudagraph_manager is not None
            self.cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._generate_drafts(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings,
                num_tokens_across_dp=num_tokens_across_dp,
                cudagraph_runtime_mode=batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]


class HolderMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose; lengths read from a holder object's property defined in another module
    # expect: SG104
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        lens = DCPLocalLens(self.input_buffers, self.block_tables).bind(num_reqs)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=lens.local_seq_lens,
        )


class KwargsMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose; optional helper kwargs built in a dict from the target batch, splatted into the call
    # expect: SG105
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        extra: dict[str, Any] = {}
        if self.dcp_size > 1:
            # MTP keeps the target's query layout, so the target's split holds.
            extra["dcp_local_seq_lens"] = input_batch.dcp_local_seq_lens
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            **extra,
        )


class GroupBuildMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata inner loop inlined into MultiModuleMTPSpeculator.propose; group.build_metadata per attention group with dataclasses.replace
    # expect: SG101
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_reqs_padded = (batch_desc.num_reqs or num_reqs) if is_full else num_reqs
        num_tokens = batch_desc.num_tokens if is_full else input_batch.num_tokens
        query_start_loc_cpu = torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs_padded + 1]
        )
        common = CommonAttentionMetadata(
            query_start_loc=self.input_buffers.query_start_loc[: num_reqs_padded + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            num_reqs=num_reqs_padded,
            num_actual_tokens=num_tokens,
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            max_seq_len=self.draft_max_seq_len,
            block_table_tensor=self.block_tables.input_block_tables[0],
            slot_mapping=self.block_tables.slot_mappings[0, :num_tokens],
            causal=True,
        )
        attn_metadata: dict[str, Any] = {}
        for gid, groups in enumerate(self.attn_groups):
            group_common = replace(
                common,
                block_table_tensor=self.block_tables.input_block_tables[gid][
                    :num_reqs_padded
                ],
                slot_mapping=self.block_tables.slot_mappings[gid, :num_tokens],
            )
            for group in groups:
                metadata = group.build_metadata(group_common)
                for layer_name in group.layer_names:
                    attn_metadata[layer_name] = metadata
        return attn_metadata


class ReplacedDescMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill (descriptor built for the helper); dataclasses.replace re-labels the dispatched descriptor as FULL
    # expect: SG103
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        # The MTP modules always run the dispatched (padded) width, so attention
        # is described with the graph shape even when the step runs eagerly.
        attn_desc = (
            batch_desc
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=attn_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )


class WarmupMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill; eager descriptor constructed with the real token count for profile runs
    # expect: clean
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode != CUDAGraphMode.NONE:
            return super()._build_step_metadata(input_batch, batch_desc, num_reqs)
        eager_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE,
            num_tokens=input_batch.num_tokens,
            num_reqs=num_reqs,
        )
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=eager_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )


class ToolMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose; decode-only fast path through a module-level builder of another module
    # expect: SG101
    def _build_step_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        if not input_batch.decode_graph_eligible or input_batch.has_prefill:
            return super()._build_step_metadata(input_batch, batch_desc, num_reqs)
        num_query_per_req = self.num_speculative_steps + 1
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        return build_draft_metadata(
            self,
            num_reqs=num_reqs,
            num_reqs_padded=(batch_desc.num_reqs or num_reqs) if is_full else num_reqs,
            num_tokens=(
                batch_desc.num_tokens if is_full else num_reqs * num_query_per_req
            ),
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )


class PaddedReqsMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; override that widens num_reqs to the descriptor's before delegating
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
        # Cover the padded request rows so the uniform layout has no holes.
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=batch_desc.num_reqs or num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class FallOffMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; override that stashes the result on self and has no return
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
        attn_metadata = super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
            slot_mappings,
        )
        # Kept for the acceptance-rate debug dump.
        self._last_attn_metadata = attn_metadata


class AssertingMTPSpeculator(ForkMTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; observing override with assertions, unchanged keyword delegation
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
        assert int(query_start_loc_np[num_reqs]) <= self.max_num_tokens, (
            "MTP draft batch exceeds max_num_batched_tokens"
        )
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert batch_desc.num_reqs is not None
        return super()._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
            slot_mappings=slot_mappings,
        )
