# SPDX-License-Identifier: Apache-2.0
"""DFlash-family drafters carried in the fork.

Each class ports an upstream parallel drafter (``spec_decode/dflash``,
``dspark``, ``dflash2``, ``xpress``) and adds one fork-local feature on top of
the shared query step in ``_dflash_step``.
"""

import bisect
from dataclasses import replace
from functools import cached_property, partial
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
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
from vllm.v1.worker.gpu.cudagraph_utils import (
    BatchExecutionDescriptor,
    CudaGraphManager,
)
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
from vllm.v1.worker.gpu.spec_decode.dflash.cudagraph import DFlashCudaGraphManager
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.xpress.speculator import XPressSpeculator
from vllm.v1.worker.utils import AttentionGroup

from ._dflash_step import QueryStepMixin

logger = init_logger(__name__)


# ---------------------------------------------------------------------------
# Async-scheduling DSpark: the dispatch result is cached on the instance so the
# Markov head and the metadata build agree on one descriptor.
# ---------------------------------------------------------------------------
class WindowedDSparkSpeculator(DSparkSpeculator):
    _speculator_name = "DSpark-windowed"

    # Set by _dispatch_query_step, read by the metadata build and the replay.
    _step_desc: BatchExecutionDescriptor | None = None
    _graph_num_reqs: int | None = None

    def _dispatch_query_step(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        is_profile: bool,
    ) -> DPSyncState | None:
        batch_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(
                dp_sync_state, num_reqs, self.num_query_per_req
            )
            if dp_sync_state is not None
            else (None, num_reqs * self.num_query_per_req)
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
        self._step_desc = batch_desc
        # Requests the step runs with once graph/DP padding is applied; the
        # Markov head samples for all of them so its buffers stay graph-sized.
        self._graph_num_reqs = batch_desc.num_reqs or num_reqs
        return batch_sync

    # idiom: DFlashSpeculator.propose -> _build_uniform_attn_metadata(num_reqs=...), with the padded request count cached on self by another method (class-declared attribute set later)
    # expect: SG103
    def _build_query_metadata(self, input_batch: InputBatch) -> dict[str, Any] | None:
        assert self._step_desc is not None, "dispatch the query step first"
        num_reqs = (
            self._graph_num_reqs
            if self._graph_num_reqs is not None
            else input_batch.num_reqs
        )
        return self._build_uniform_attn_metadata(
            batch_desc=self._step_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


# ---------------------------------------------------------------------------
# Keep the draft builders' persistent buffers graph-shaped on eager fallback.
# ---------------------------------------------------------------------------
class PersistentMetaDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-persistent"

    # idiom: SpeculatorCudaGraphManager.specialize_spec_tokens's dataclasses.replace(desc, cg_mode=...) used to force the graph shape onto an eager batch before _build_uniform_attn_metadata
    # expect: SG103
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        meta_desc = batch_desc
        if batch_desc.num_reqs is not None and batch_desc.num_reqs > num_reqs:
            # An eager fallback of a graph-shaped batch: keep the FA3 scheduler
            # metadata sized for the graph so it is not reallocated.
            meta_desc = replace(batch_desc, cg_mode=CUDAGraphMode.FULL)
        return self._build_uniform_attn_metadata(
            batch_desc=meta_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class FallbackDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-fallback"

    # idiom: SpeculatorCudaGraphManager.specialize_spec_tokens: replace(desc, cg_mode=CUDAGraphMode.NONE) when no graph was captured for the descriptor, then the uniform helper
    # expect: clean
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        manager = self.query_cudagraph_manager
        meta_desc = batch_desc
        if batch_desc.cg_mode == CUDAGraphMode.FULL and (
            manager is None or batch_desc not in manager.graphs
        ):
            # Graphs were released (elastic EP); this step runs eagerly.
            meta_desc = replace(batch_desc, cg_mode=CUDAGraphMode.NONE)
        return self._build_uniform_attn_metadata(
            batch_desc=meta_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


# ---------------------------------------------------------------------------
# Bucket the request count to captured sizes (SGLang cuda_graph_runner style).
# ---------------------------------------------------------------------------
class BucketedDSparkSpeculator(QueryStepMixin, DSparkSpeculator):
    _speculator_name = "DSpark-bucketed"

    @cached_property
    def _req_buckets(self) -> list[int]:
        sizes = self.vllm_config.compilation_config.cudagraph_capture_sizes or []
        q = self.num_query_per_req
        return sorted({s // q for s in sizes if s % q == 0 and s // q > 0})

    # idiom: SGLang CudaGraphRunner.replay_prepare bisect.bisect_left(self.capture_bs, raw_bs) on capture sizes, fed to _build_uniform_attn_metadata through a kwargs dict built with dict()/.update and **
    # expect: SG103
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        buckets = self._req_buckets
        idx = bisect.bisect_left(buckets, num_reqs)
        bucket_reqs = buckets[idx] if idx < len(buckets) else num_reqs
        kwargs = dict(
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            step=self.num_query_per_req,
        )
        kwargs.update(
            num_reqs=bucket_reqs,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            causal=self._group_causal,
        )
        return self._build_uniform_attn_metadata(**kwargs)


# ---------------------------------------------------------------------------
# Absorb graph padding into the last request's query block.
# ---------------------------------------------------------------------------
class PaddedTailDFlash2Speculator(QueryStepMixin, DFlash2Speculator):
    _speculator_name = "DFlash2-paddedtail"

    # idiom: MultiModuleMTPSpeculator.propose's non-uniform _build_attn_metadata(query_start_loc_np=...), with a match statement whose or-pattern lets PIECEWISE pad the last query block to batch_desc.num_tokens
    # expect: SG103
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        query_start_loc_np = self.arange_np[: num_reqs + 1] * self.num_query_per_req
        match batch_desc.cg_mode:
            case CUDAGraphMode.NONE:
                pass
            case CUDAGraphMode.PIECEWISE | CUDAGraphMode.FULL:
                # Compiled graphs run the bucket; hand the padded rows to the
                # last request so query_start_loc covers them.
                query_start_loc_np = query_start_loc_np.copy()
                query_start_loc_np[num_reqs] = batch_desc.num_tokens
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


# ---------------------------------------------------------------------------
# XPress with a query_start_loc sized to the next captured token count.
# ---------------------------------------------------------------------------
class CaptureSizedXPressSpeculator(QueryStepMixin, XPressSpeculator):
    _speculator_name = "XPress-capturesized"

    # idiom: CudaGraphManager._init_candidates capture sizes; next(...) over a sorted generator expression picks the captured size, a lambda closure turns it into query_start_loc_np for _build_attn_metadata
    # expect: SG103
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        q = self.num_query_per_req
        total = num_reqs * q
        sizes = self.vllm_config.compilation_config.cudagraph_capture_sizes or []
        captured = next((s for s in sorted(sizes) if s >= total), total)
        to_offsets = lambda last: np.append(  # noqa: E731
            self.arange_np[:num_reqs] * q, last
        ).astype(np.int32)
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=to_offsets(captured),
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=q,
            causal=self._group_causal,
        )


# ---------------------------------------------------------------------------
# Upstream-shaped query step; padded counts only size the forward.
# ---------------------------------------------------------------------------
class DPForwardDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-dpforward"

    # idiom: DFlashSpeculator.propose after the DP fix: batch_desc.num_tokens and num_tokens_across_dp feed slot mappings and set_forward_context only, the uniform helper gets the real num_reqs
    # expect: clean
    def _query_step(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        dp_sync_state: DPSyncState | None = None,
        is_profile: bool = False,
    ) -> torch.Tensor:
        batch_desc, batch_sync = self._dispatch_query(
            num_reqs, dp_sync_state, is_profile
        )
        num_tokens_padded = batch_desc.num_tokens
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        max_dp_tokens = (
            int(num_tokens_across_dp.max())
            if num_tokens_across_dp is not None
            else num_tokens_padded
        )
        assert max_dp_tokens <= self.max_num_tokens
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        self._prepare_eplb_forward(num_reqs * self.num_query_per_req)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.query_cudagraph_manager is not None
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
            return self.draft_tokens[:num_reqs]
        slot_mappings = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, :num_tokens_padded],
            self.kv_cache_config,
        )
        self._generate_draft(
            num_reqs,
            num_tokens_padded,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp=num_tokens_across_dp,
            cudagraph_runtime_mode=batch_desc.cg_mode,
        )
        return self.draft_tokens[:num_reqs]


# ---------------------------------------------------------------------------
# DCP: the fork's pre-#upstream copy of the rank-local recompute.
# ---------------------------------------------------------------------------
class DcpDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-dcp"

    # idiom: vLLM DFlashSpeculator before the DSpark+DCP fix (its own prepare_dcp_local_seq_lens call, result handed to the helper); tuple unpacking of the buffers
    # expect: SG104
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        dcp_local_seq_lens = None
        if self.dcp_size > 1:
            local_buf, global_lens = (
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
            )
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                local_buf,
                global_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class PartialDcpDSparkSpeculator(QueryStepMixin, DSparkSpeculator):
    _speculator_name = "DSpark-dcp-partial"

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
        self._refresh_dcp_lens = None
        if self.dcp_size > 1:
            self._refresh_dcp_lens = partial(
                prepare_dcp_local_seq_lens,
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                dcp_size=self.dcp_size,
                dcp_rank=block_tables.cp_rank,
                cp_interleave=block_tables.cp_interleave,
            )

    # idiom: DSpark+DCP bring-up: prepare_dcp_local_seq_lens bound into a functools.partial in set_attn and called later per step (prepare_context_anchor hook)
    # expect: SG104
    def prepare_context_anchor(
        self,
        num_reqs: int,
        query_start_loc: torch.Tensor,
        num_rejected: torch.Tensor | None,
    ) -> None:
        super().prepare_context_anchor(num_reqs, query_start_loc, num_rejected)
        refresh = self._refresh_dcp_lens
        if refresh is not None:
            # The anchor moved seq_lens; keep the rank-local view in step.
            refresh(num_reqs)


# ---------------------------------------------------------------------------
# DCP lengths handed to the helper by the drafter itself.
# ---------------------------------------------------------------------------
class TargetLensDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-targetlens"

    # idiom: DFlash reusing the target's InputBatch.dcp_local_seq_lens (as model_states/default.py passes it) through a kwargs dict grown with .update and splatted into _build_uniform_attn_metadata
    # expect: SG105
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        extra = dict(causal=self._group_causal)
        if input_batch.dcp_local_seq_lens is not None:
            # Same KV cache as the target: reuse its rank-local lengths.
            extra.update(dcp_local_seq_lens=input_batch.dcp_local_seq_lens)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            **extra,
        )


class CachedLensDSparkSpeculator(QueryStepMixin, DSparkSpeculator):
    _speculator_name = "DSpark-cachedlens"

    @cached_property
    def _target_local_lens(self) -> torch.Tensor:
        # The target runner's persistent buffer; stable address for graphs.
        return self.target_input_buffers.dcp_local_seq_lens

    # idiom: DSpark drafter reading the target runner's InputBuffers.dcp_local_seq_lens through a cached_property and handing it to _build_uniform_attn_metadata
    # expect: SG105
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=self._target_local_lens if self.dcp_size > 1 else None,
        )


class ExplicitNoLensDFlash2Speculator(QueryStepMixin, DFlash2Speculator):
    _speculator_name = "DFlash2-nolens"

    # idiom: DFlashSpeculator.propose after the DCP fix (no lengths of its own; the helper recomputes); kwargs dict(...) naming dcp_local_seq_lens=None explicitly, then .update and **
    # expect: clean
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        # None: the shared helper recomputes rank-local lengths from the
        # draft's own seq_lens (the target's are stale after rejection).
        kwargs = dict(dcp_local_seq_lens=None, causal=self._group_causal)
        kwargs.update(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
        )
        return self._build_uniform_attn_metadata(
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            **kwargs,
        )


# ---------------------------------------------------------------------------
# Builders driven directly.
# ---------------------------------------------------------------------------
class GroupRefreshDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-grouprefresh"

    def _group_is_causal(self, gid: int) -> bool:
        causal = self._group_causal
        if isinstance(causal, bool):
            return causal
        return causal.get(gid, True)

    # idiom: build_attn_metadata's per-group loop (attn_group.build_metadata(common_attn_metadata, ubatch_idx)) re-run by the drafter for its non-causal KV groups only
    # expect: SG101
    def _refresh_noncausal_groups(
        self,
        attn_metadata: dict[str, Any],
        common: CommonAttentionMetadata,
    ) -> None:
        noncausal = replace(common, causal=False)
        for gid, groups in enumerate(self.attn_groups):
            if self._group_is_causal(gid):
                continue
            for group in groups:
                metadata = group.build_metadata(noncausal)
                for layer_name in group.layer_names:
                    attn_metadata[layer_name] = metadata


class BuilderCacheDSparkSpeculator(QueryStepMixin, DSparkSpeculator):
    _speculator_name = "DSpark-buildercache"

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
        self._builders = {
            group.kv_cache_group_id: group.get_metadata_builder()
            for groups in self.attn_groups
            for group in groups
        }

    # idiom: AttentionGroup.get_metadata_builder() builders cached in a dict comprehension keyed by kv_cache_group_id, later .build(common_prefix_len, common_attn_metadata) per group
    # expect: SG101
    def _rebuild_group(self, gid: int, common: CommonAttentionMetadata) -> Any:
        builder = self._builders[gid]
        return builder.build(0, common)


class NoAotDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-noaot"

    # idiom: DFlashSpeculator.set_attn toggling FlashAttention's builder.aot_schedule through group.get_metadata_builder() (builder touched, nothing built)
    # expect: clean
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
        builders = [
            group.get_metadata_builder()
            for groups in self.attn_groups
            for group in groups
        ]
        for builder in builders:
            # Our drafter is always varlen-unfriendly to the AOT scheduler.
            if getattr(builder, "aot_schedule", False):
                builder.aot_schedule = False  # type: ignore[attr-defined]
        logger.debug("%s: %d draft builders", self._speculator_name, len(builders))


class ClampedDSparkSpeculator(QueryStepMixin, DSparkSpeculator):
    _speculator_name = "DSpark-clamped"

    # idiom: FastPrefillHelper.prepare's min(desc.num_tokens, capacity) clamp, applied to the request count only when this batch's own descriptor `is` CUDAGraphMode.FULL, before the uniform helper
    # expect: clean
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode is CUDAGraphMode.FULL and batch_desc.num_reqs:
            meta_reqs = min(batch_desc.num_reqs, self.max_num_reqs)
        else:
            meta_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=meta_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class ReplayLensDFlashSpeculator(QueryStepMixin, DFlashSpeculator):
    _speculator_name = "DFlash-replaylens"

    def _prepare_graph_replay(
        self,
        input_batch: InputBatch,
        num_graph_reqs: int,
        last_hidden_states: torch.Tensor,
        aux_hidden_states: list[torch.Tensor] | None,
        num_rejected: torch.Tensor,
        dummy_run: bool,
    ) -> None:
        super()._prepare_graph_replay(
            input_batch,
            num_graph_reqs,
            last_hidden_states,
            aux_hidden_states,
            num_rejected,
            dummy_run,
        )
        # Remember the rank-local lengths the replayed step was staged with.
        if input_batch.dcp_local_seq_lens is not None:
            self._replay_dcp_lens = input_batch.dcp_local_seq_lens

    # idiom: DFlashSpeculator._prepare_graph_replay override stashing the target InputBatch.dcp_local_seq_lens on self; the next metadata build reads it back with getattr(..., None) and hands it to the helper
    # expect: SG105
    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=getattr(self, "_replay_dcp_lens", None),
        )


class DcpAwareDFlashGraphManager(DFlashCudaGraphManager):
    """DFlash capture that also stages DCP lengths for the dummy batch."""

    # idiom: dflash/cudagraph.py DFlashCudaGraphManager.capture: create_forward_fn closure preparing a dummy batch (InputBatch.make_dummy, prepare_dcp_local_seq_lens) and build_attn_metadata(for_cudagraph_capture=True)
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
            input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
            slot_mappings = block_tables.get_dummy_slot_mappings(num_tokens)
            attn_metadata = None
            if desc.cg_mode == CUDAGraphMode.FULL:
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
                    query_start_loc_cpu=torch.from_numpy(
                        input_batch.query_start_loc_np
                    ),
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
            slot_mappings_by_layer = build_slot_mappings_by_layer(
                slot_mappings, kv_cache_config
            )

            def forward(cg_mode: CUDAGraphMode) -> None:
                prepare_forward(num_reqs, attn_metadata)
                forward_fn(
                    num_reqs,
                    num_tokens,
                    attn_metadata,
                    slot_mappings_by_layer,
                    None,
                    cg_mode,
                )

            return forward

        CudaGraphManager.capture(self, create_forward_fn, progress_bar_desc)
