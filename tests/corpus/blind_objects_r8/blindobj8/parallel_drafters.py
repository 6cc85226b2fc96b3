# SPDX-License-Identifier: Apache-2.0
"""Parallel (DFlash / DSpark style) drafters of the fork.

Each request drafts a whole block of ``num_query_per_req`` query tokens in one
forward. The upstream-based classes extend ``DFlashSpeculator`` /
``DSparkSpeculator``; the ``*BlockDrafter`` family runs on ``LegacyDraftBase``.
"""

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.forward_context import BatchDescriptor, set_forward_context
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.utils import record_function_or_nullcontext
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
from vllm.v1.worker.gpu.spec_decode.dflash.cudagraph import DFlashCudaGraphManager
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.utils import AttentionGroup

from blindobj8.fork_bases import LegacyDraftBase

logger = init_logger(__name__)


# ---------------------------------------------------------------------------
# Capture-time and eager module helpers
# ---------------------------------------------------------------------------


# idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture; capture-time builder (for_cudagraph_capture=True), FULL descriptors only, DCP prepared on the dummy batch
# expect: clean
def _prepare_block_inputs_to_capture(
    desc: BatchExecutionDescriptor,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
    causal: bool | Mapping[int, bool],
    max_num_reqs: int,
) -> AttentionState:
    num_tokens = desc.num_tokens
    num_reqs = desc.num_reqs or min(num_tokens, max_num_reqs)
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    input_block_tables = block_tables.get_dummy_block_tables(num_reqs)
    slot_mappings = block_tables.get_dummy_slot_mappings(num_tokens)
    slot_mappings_by_layer = build_slot_mappings_by_layer(
        slot_mappings, kv_cache_config
    )
    if desc.cg_mode != CUDAGraphMode.FULL:
        # PIECEWISE graphs run attention eagerly; nothing to bake in.
        return AttentionState(None, slot_mappings_by_layer)

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
    return AttentionState(attn_metadata, slot_mappings_by_layer)


# idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture; module-level eager twin of the capture builder, called by a speculator (no capture flag)
# expect: SG101
def build_block_metadata_eager(
    speculator: DFlashSpeculator,
    input_batch: InputBatch,
    num_reqs: int,
) -> dict[str, Any]:
    assert speculator.dcp_size == 1, "eager block path is DCP-free"
    q = speculator.num_query_per_req
    num_tokens = num_reqs * q
    query_start_loc_cpu = torch.from_numpy(speculator.arange_np[: num_reqs + 1] * q)
    upper = input_batch.seq_lens_cpu_upper_bound[:num_reqs] + q
    return build_attn_metadata(
        attn_groups=speculator.attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=speculator.input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        max_query_len=q,
        seq_lens=speculator.input_buffers.seq_lens[:num_reqs],
        max_seq_len=speculator.draft_max_seq_len,
        block_tables=[
            x[:num_reqs] for x in speculator.block_tables.input_block_tables
        ],
        slot_mappings=speculator.block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=speculator.kv_cache_config,
        causal=speculator._group_causal,
        seq_lens_cpu_upper_bound=upper.clamp_(max=speculator.max_model_len),
    )


class BlockGraphManager(DFlashCudaGraphManager):
    """Query-block graph manager that skips attention for PIECEWISE graphs."""

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py DFlashCudaGraphManager.capture; nested create_forward_fn closure over the capture-time builder
    # expect: clean
    def capture(
        self,
        forward_fn: Callable,
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        max_model_len: int,
        causal: bool | Mapping[int, bool],
        prepare_forward: Callable[[int, dict[str, Any] | None], None],
        progress_bar_desc: str = "Capturing CUDA graphs",
    ) -> None:
        def create_forward_fn(
            desc: BatchExecutionDescriptor, warmup: bool
        ) -> Callable[[CUDAGraphMode], None]:
            num_tokens = desc.num_tokens
            num_reqs = desc.num_reqs or min(num_tokens, self.max_num_reqs)
            num_tokens_across_dp = (
                torch.full((self.dp_size,), num_tokens, dtype=torch.int32, device="cpu")
                if self.dp_size > 1
                else None
            )
            attn_metadata, slot_mappings = _prepare_block_inputs_to_capture(
                desc,
                input_buffers,
                block_tables,
                attn_groups,
                kv_cache_config,
                max_model_len,
                causal,
                self.max_num_reqs,
            )

            def forward(cg_mode: CUDAGraphMode) -> None:
                prepare_forward(num_reqs, attn_metadata)
                forward_fn(
                    num_reqs,
                    num_tokens,
                    attn_metadata,
                    slot_mappings,
                    num_tokens_across_dp,
                    cg_mode,
                )

            return forward

        super(DFlashCudaGraphManager, self).capture(
            create_forward_fn, progress_bar_desc
        )


# ---------------------------------------------------------------------------
# Upstream-based drafters
# ---------------------------------------------------------------------------


class ForkDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm 0.28.0 vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator._build_draft_attn_metadata; override with early None return and causal/num_query_per_req forced from self
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
            return None
        # Omitted by older call sites; DFlash always drafts a full block.
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            self.num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=self._group_causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class GraphCachedDFlash(DFlashSpeculator):
    _graph_metadata: dict[str, Any] | None = None

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py propose (FULL replay rebuild); override returns metadata cached from an earlier FULL batch
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
        replay = batch_desc.cg_mode == CUDAGraphMode.FULL
        if replay and self._graph_metadata is not None:
            # FULL replays read the builders' persistent buffers, so the dict
            # from the first replay-shaped build stays valid.
            return self._graph_metadata
        metadata = super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
            slot_mappings,
        )
        if replay:
            self._graph_metadata = metadata
        return metadata


class ProfiledDSpark(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; observing override under a decorator and a profiling context manager, every argument forwarded
    # expect: clean
    @torch.inference_mode()
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
        with record_function_or_nullcontext("dspark: draft attn metadata"):
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )


class CheckedDFlash(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; observing override that asserts and logs its arguments, keyword forwarding
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
        assert num_reqs <= self.max_num_reqs, (num_reqs, self.max_num_reqs)
        assert query_start_loc_np.shape[0] >= num_reqs + 1
        logger.debug(
            "DFlash draft metadata: reqs=%d mode=%s tokens=%d step=%d",
            num_reqs,
            batch_desc.cg_mode,
            batch_desc.num_tokens,
            step,
        )
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


class RecordingDFlash(DFlashSpeculator):
    _last_build: tuple[int, CUDAGraphMode, int] | None = None

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; override records its call on self, result returned unchanged
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
        self._last_build = (num_reqs, batch_desc.cg_mode, step)
        metadata = super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )
        return metadata


class FallThroughDSpark(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dspark/speculator.py DSparkSpeculator (fill-in layout); override whose second branch falls off its end without returning
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
        if num_query_per_req == self.num_query_per_req:
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )
        logger.debug(
            "DSpark block width %d differs from configured %d",
            num_query_per_req,
            self.num_query_per_req,
        )
        super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
        )


class AnchorShiftDSpark(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dspark/speculator.py DSparkSpeculator.__init__ (sample_from_anchor); override rewrites the step it forwards
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
        # Anchor-as-first-prediction: the anchor slot adds no new KV row.
        if self.sample_from_anchor:
            step -= 1
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
        )


class TolerantDSpark(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; observer-looking override whose contextlib.suppress lets it fall off its end
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
        # Builders assert on transient shape mismatches during warmup; the
        # draft then runs without metadata instead of killing the engine.
        with contextlib.suppress(AssertionError, ValueError):
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )


class DcpCopyDFlash(DFlashSpeculator):
    # idiom: vllm 0.29.0 vllm/v1/worker/gpu/spec_decode/dflash/speculator.py propose (the DCP prep upstream later removed); subclass prepares rank-local lengths and hands them to the helper
    # expect: SG104
    def _build_query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        dcp_local_seq_lens = None
        if self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class EagerFastPathDSpark(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture; eager path builds through a local alias of the sink
    # expect: SG101
    def _eager_block_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        if self.dcp_size > 1 or batch_desc.cg_mode == CUDAGraphMode.FULL:
            return self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=self.num_query_per_req,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=self.num_query_per_req,
                causal=self._group_causal,
            )
        build = build_attn_metadata
        q = self.num_query_per_req
        num_tokens = num_reqs * q
        upper = torch.clamp(
            input_batch.seq_lens_cpu_upper_bound[:num_reqs] + q, max=self.max_model_len
        )
        return build(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1] * q),
            max_query_len=q,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=self._group_causal,
            seq_lens_cpu_upper_bound=upper,
        )


class PerGroupDFlash(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (per-group loop); speculator calls each group's metadata builder .build() itself
    # expect: SG101
    def _per_group_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
    ) -> dict[str, Any]:
        assert self.dcp_size == 1
        q = self.num_query_per_req
        num_tokens = num_reqs * q
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1] * q)
        seq_lens_cpu_upper_bound = torch.clamp(
            input_batch.seq_lens_cpu_upper_bound[:num_reqs] + q, max=self.max_model_len
        )
        attn_metadata: dict[str, Any] = {}
        for gid, groups in enumerate(self.attn_groups):
            if not groups:
                continue
            group_causal = (
                self._group_causal
                if isinstance(self._group_causal, bool)
                else self._group_causal.get(gid, True)
            )
            common = CommonAttentionMetadata(
                query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
                query_start_loc_cpu=query_start_loc_cpu,
                seq_lens=self.input_buffers.seq_lens[:num_reqs],
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                max_seq_len=self.draft_max_seq_len,
                num_reqs=num_reqs,
                num_actual_tokens=num_tokens,
                max_query_len=q,
                block_table_tensor=self.block_tables.input_block_tables[gid][:num_reqs],
                slot_mapping=self.block_tables.slot_mappings[gid, :num_tokens],
                causal=group_causal,
            )
            for group in groups:
                metadata = group.get_metadata_builder().build(
                    common_prefix_len=0, common_attn_metadata=common
                )
                attn_metadata.update(dict.fromkeys(group.layer_names, metadata))
        return attn_metadata


# ---------------------------------------------------------------------------
# Legacy-helper block drafters
# ---------------------------------------------------------------------------


class LegacyBlockDrafter(LegacyDraftBase):
    """Block drafter on the legacy helper (pre-#55458 call convention)."""

    def __init__(self, vllm_config, device: torch.device) -> None:
        super().__init__(vllm_config, device)
        self.num_query_per_req = 1 + self.num_speculative_steps
        self.query_cudagraph_manager: DFlashCudaGraphManager | None = None
        self._group_causal: bool | dict[int, bool] = False

    def _uniform_dp_sync(
        self, target_sync: DPSyncState, num_reqs: int
    ) -> tuple[DPSyncState, int]:
        num_batch_tokens = target_sync.num_reqs * self.num_query_per_req
        assert num_reqs * self.num_query_per_req <= num_batch_tokens
        return replace(
            target_sync,
            num_tokens_across_dp=torch.full_like(
                target_sync.num_tokens_across_dp, num_batch_tokens
            ),
            uniform_token_count=self.num_query_per_req,
            eager=False,
        ), num_batch_tokens

    def _generate_block(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode,
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
                inputs_embeds=None,
            )
        logits = self.model.compute_logits(
            hidden_states[: num_reqs * self.num_query_per_req]
        )
        draft = logits.argmax(dim=-1).view(num_reqs, self.num_query_per_req)
        self.draft_tokens[:num_reqs] = draft[:, 1:]

    def _dispatch_block(
        self, num_reqs: int, dp_sync_state: DPSyncState | None, is_profile: bool
    ) -> tuple[BatchExecutionDescriptor, DPSyncState | None]:
        num_query_tokens = num_reqs * self.num_query_per_req
        batch_sync, num_batch_tokens = (
            self._uniform_dp_sync(dp_sync_state, num_reqs)
            if dp_sync_state is not None
            else (None, num_query_tokens)
        )
        return dispatch_cg_and_sync_dp(
            self.query_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=self.num_query_per_req,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=batch_sync,
        )

    # idiom: vllm 0.28.0 vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose; dispatched (DP-padded) count handed to the legacy helper in every mode
    # expect: SG103
    def _draft_block(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> torch.Tensor:
        num_reqs = input_batch.num_reqs
        batch_desc, batch_sync = self._dispatch_block(
            num_reqs, dp_sync_state, is_profile
        )
        num_tokens_padded = batch_desc.num_tokens
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        # Rebuild even for FULL replays so builder-internal state is fresh.
        draft_attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs_padded,
            num_tokens_padded=num_tokens_padded,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            num_query_per_req=self.num_query_per_req,
            causal=self._group_causal,
        )
        slot_mappings_by_layer = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, :num_tokens_padded],
            self.kv_cache_config,
        )
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.query_cudagraph_manager is not None
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._generate_block(
                num_reqs,
                num_tokens_padded,
                draft_attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]


class PaddingAwareBlockDrafter(LegacyBlockDrafter):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata (FULL vs eager count) applied at a legacy call site; conditional expression on the descriptor's mode
    # expect: clean
    def _draft_block(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> torch.Tensor:
        num_reqs = input_batch.num_reqs
        num_query_tokens = num_reqs * self.num_query_per_req
        batch_desc, batch_sync = self._dispatch_block(
            num_reqs, dp_sync_state, is_profile
        )
        num_tokens_padded = batch_desc.num_tokens
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        replay = batch_desc.cg_mode == CUDAGraphMode.FULL
        draft_attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=num_tokens_padded if replay else num_query_tokens,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            num_query_per_req=self.num_query_per_req,
            causal=self._group_causal,
        )
        slot_mappings_by_layer = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, :num_tokens_padded],
            self.kv_cache_config,
        )
        if replay:
            assert self.query_cudagraph_manager is not None
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._generate_block(
                num_reqs,
                num_tokens_padded,
                draft_attn_metadata,
                slot_mappings_by_layer,
                num_tokens_across_dp,
                batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]


class UniformOnlyBlockDrafter(PaddingAwareBlockDrafter):
    # idiom: vllm 0.28.0 vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator._build_draft_attn_metadata; override of the legacy helper that raises
    # expect: SG102
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int = 1,
        causal: bool | Mapping[int, bool] = True,
        query_start_loc_np: np.ndarray | None = None,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        raise NotImplementedError(
            f"{type(self).__name__} builds draft metadata through "
            "_build_uniform_attn_metadata only"
        )
