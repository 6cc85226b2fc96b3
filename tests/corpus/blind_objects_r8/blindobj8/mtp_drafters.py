# SPDX-License-Identifier: Apache-2.0
"""Multi-module MTP drafters of the fork.

``ForkMTPBase.propose`` follows upstream's ``MultiModuleMTPSpeculator.propose``
but routes the draft attention-metadata rebuild through ``_rebuild_attn`` so
variants can change it. MTP keeps the target's mixed prefill/decode layout,
so it uses the non-uniform shared helper.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu import attn_utils
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import (
    MultiModuleMTPSpeculator,
    pad_trailing_draft_slots,
)
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils import (
    SpeculatorCudaGraphManager,
)
from vllm.v1.worker.utils import AttentionGroup, get_uniform_decode_token_count

from blindobj8._dcp import RankLocalLens
from blindobj8._meta import attn_token_count, build_step_metadata

logger = init_logger(__name__)


# idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata (DCP prep); module-level function of a speculator module preparing the draft's lengths
# expect: SG104
def refresh_draft_dcp_lens(
    speculator: DraftModelSpeculator, num_reqs: int
) -> torch.Tensor | None:
    """Recompute the drafter's rank-local lengths after its seq_lens moved."""
    block_tables = speculator.block_tables
    if block_tables.cp_size == 1:
        return None
    return prepare_dcp_local_seq_lens(
        speculator.input_buffers.dcp_local_seq_lens,
        speculator.input_buffers.seq_lens,
        num_reqs,
        block_tables.cp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


class ForkMTPBase(MultiModuleMTPSpeculator):
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
        max_seq_len = input_batch.seq_lens_cpu_upper_bound[:num_reqs].max().item()
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
            attn_metadata = self._rebuild_attn(input_batch, batch_desc, num_reqs)
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

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py MultiModuleMTPSpeculator.propose; non-uniform shared helper with the target's query_start_loc_np
    # expect: clean
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        draft_attn_metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )
        assert draft_attn_metadata is not None
        return draft_attn_metadata


class TargetLensMTP(ForkMTPBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; the target batch's dcp_local_seq_lens handed to the shared helper
    # expect: SG105
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        # MTP drafts over the target's own query layout, so the target's
        # rank-local lengths line up with it.
        metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )
        assert metadata is not None
        return metadata


class ScopedLensMTP(ForkMTPBase):
    @contextmanager
    def _dcp_scope(self, input_batch: InputBatch) -> Iterator[torch.Tensor | None]:
        lens = input_batch.dcp_local_seq_lens
        try:
            yield lens
        finally:
            logger.debug("MTP draft metadata built over %d requests", input_batch.num_reqs)

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; lengths obtained from a context manager that yields the target batch's view
    # expect: SG105
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        with self._dcp_scope(input_batch) as dcp_lens:
            metadata = self._build_attn_metadata(
                num_reqs,
                batch_desc,
                input_batch.query_start_loc_np,
                input_batch.seq_lens_cpu_upper_bound,
                0,
                True,
                dcp_lens,
            )
        assert metadata is not None
        return metadata


class ReusedLensMTP(ForkMTPBase):
    """MTP drafter that skips the DCP recompute for an unchanged batch."""

    _prev_req_ids: tuple[str, ...] = ()
    _prev_dcp_lens: torch.Tensor | None = None

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata (caller-handed lengths); lengths cloned after an earlier batch, reused when the request ids match
    # expect: SG105
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        same_batch = tuple(input_batch.req_ids) == self._prev_req_ids
        metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=self._prev_dcp_lens if same_batch else None,
        )
        if self.dcp_size > 1 and not same_batch:
            self._prev_req_ids = tuple(input_batch.req_ids)
            self._prev_dcp_lens = self.input_buffers.dcp_local_seq_lens.clone()
        assert metadata is not None
        return metadata


class PartialBuildMTP(ForkMTPBase):
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
        self._build = partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=kv_cache_config,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; functools.partial of the sink stored on the instance in set_attn, called here
    # expect: SG101
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        if self.dcp_size > 1 or batch_desc.cg_mode == CUDAGraphMode.FULL:
            return super()._rebuild_attn(input_batch, batch_desc, num_reqs)
        qsl_np = input_batch.query_start_loc_np[: num_reqs + 1]
        num_tokens = attn_token_count(batch_desc, qsl_np)
        return self._build(
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(qsl_np),
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )


class ModuleAliasMTP(ForkMTPBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; sink reached through the attn_utils module attribute
    # expect: SG101
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        if self.dcp_size > 1 or batch_desc.cg_mode == CUDAGraphMode.FULL:
            return super()._rebuild_attn(input_batch, batch_desc, num_reqs)
        # Eager/PIECEWISE: the real token count, as query_start_loc has it.
        num_tokens = input_batch.num_tokens
        return attn_utils.build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )


class TreeHelperMTP(ForkMTPBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; sink reached through a metadata helper function of another fork module
    # expect: SG101
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        if self.dcp_size > 1 or batch_desc.cg_mode == CUDAGraphMode.FULL:
            return super()._rebuild_attn(input_batch, batch_desc, num_reqs)
        qsl_np = input_batch.query_start_loc_np[: num_reqs + 1]
        return build_step_metadata(
            self.attn_groups,
            self.kv_cache_config,
            self.input_buffers,
            self.block_tables.input_block_tables,
            self.block_tables.slot_mappings,
            num_reqs=num_reqs,
            num_tokens=attn_token_count(batch_desc, qsl_np),
            query_start_loc_cpu=torch.from_numpy(qsl_np),
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            max_seq_len=self.draft_max_seq_len,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )


class GroupBuildMTP(ForkMTPBase):
    # idiom: vllm/v1/worker/utils.py AttentionGroup.build_metadata; speculator builds each attention group's metadata itself
    # expect: SG101
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        if self.dcp_size > 1 or batch_desc.cg_mode == CUDAGraphMode.FULL:
            return super()._rebuild_attn(input_batch, batch_desc, num_reqs)
        qsl_np = input_batch.query_start_loc_np[: num_reqs + 1]
        num_tokens = attn_token_count(batch_desc, qsl_np)
        attn_metadata: dict[str, Any] = {}
        for gid, groups in enumerate(self.attn_groups):
            if not groups:
                continue
            common = CommonAttentionMetadata(
                query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
                query_start_loc_cpu=torch.from_numpy(qsl_np),
                seq_lens=self.input_buffers.seq_lens[:num_reqs],
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound[:num_reqs],
                max_seq_len=self.draft_max_seq_len,
                num_reqs=num_reqs,
                num_actual_tokens=num_tokens,
                max_query_len=int(input_batch.num_scheduled_tokens.max()),
                block_table_tensor=self.block_tables.input_block_tables[gid][:num_reqs],
                slot_mapping=self.block_tables.slot_mappings[gid, :num_tokens],
            )
            for group in groups:
                metadata = group.build_metadata(common, ubatch_idx=0)
                for layer_name in group.layer_names:
                    attn_metadata[layer_name] = metadata
        return attn_metadata


class ClosureMTP(ForkMTPBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; closure over the shared helper returned for later use
    # expect: clean
    def _make_step_builder(
        self, input_batch: InputBatch, num_reqs: int
    ) -> Callable[[BatchExecutionDescriptor], dict[str, Any] | None]:
        query_start_loc_np = input_batch.query_start_loc_np
        upper_bound = input_batch.seq_lens_cpu_upper_bound

        def build(batch_desc: BatchExecutionDescriptor) -> dict[str, Any] | None:
            return self._build_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                query_start_loc_np=query_start_loc_np,
                seq_lens_cpu_upper_bound=upper_bound,
                step=0,
            )

        return build

    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; builder closure made by another method, called with the batch descriptor
    # expect: clean
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        builder = self._make_step_builder(input_batch, num_reqs)
        metadata = builder(batch_desc)
        assert metadata is not None
        return metadata


class CheckedLensMTP(ForkMTPBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py propose; target lengths only inspected for a consistency check, helper left to recompute
    # expect: clean
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        target_lens = input_batch.dcp_local_seq_lens
        if (target_lens is not None) != (self.dcp_size > 1):
            logger.warning_once(
                "Target DCP lengths present=%s but draft dcp_size=%d",
                target_lens is not None,
                self.dcp_size,
            )
        metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )
        assert metadata is not None
        return metadata


class HolderLensMTP(ForkMTPBase):
    def set_attn(self, *args: Any, **kwargs: Any) -> None:
        super().set_attn(*args, **kwargs)
        self._dcp_holder = RankLocalLens(
            self.input_buffers, self.block_tables, self.dcp_size
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata (DCP recompute); property of a holder object recomputes the lengths, result handed to the helper
    # expect: SG104
    def _rebuild_attn(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any]:
        dcp_lens = None
        if self._dcp_holder.enabled:
            dcp_lens = self._dcp_holder.bind(num_reqs).fresh
        metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=dcp_lens,
        )
        assert metadata is not None
        return metadata


class MTPCaptureManager(SpeculatorCudaGraphManager):
    """Graph manager that pre-stages draft metadata for FULL captures."""

    # idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture; capture-time build (for_cudagraph_capture=True) in a graph manager, not a speculator
    # expect: clean
    def capture_metadata(
        self,
        desc: BatchExecutionDescriptor,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
    ) -> dict[str, Any] | None:
        if desc.cg_mode != CUDAGraphMode.FULL:
            return None
        num_tokens = desc.num_tokens
        num_reqs = desc.num_reqs or min(num_tokens, self.max_num_reqs)
        input_batch = InputBatch.make_dummy(
            num_reqs, num_tokens, input_buffers, max_query_len=num_tokens
        )
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
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
            max_query_len=num_tokens,
            seq_lens=input_batch.seq_lens,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            max_seq_len=max_model_len,
            block_tables=block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=block_tables.get_dummy_slot_mappings(num_tokens),
            kv_cache_config=kv_cache_config,
            for_cudagraph_capture=True,
        )
