# SPDX-License-Identifier: Apache-2.0
"""DFlash-family drafters (DFlash, DSpark, DFlash2, XPress) with the fork's
data-parallel and eager-metadata changes."""

from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata as _build_md
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.xpress.speculator import XPressSpeculator
from vllm.v1.worker.utils import AttentionGroup

from ._metadata import EagerMetadataMixin, build_eager_draft_metadata
from ._padding import DraftGraphState, dp_padded_shape

# ---------------------------------------------------------------------------
# Token-count (SG103-class) variants
# ---------------------------------------------------------------------------


class DPQueryDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter that lays the query block out for every DP rank."""

    # idiom: DFlashSpeculator.propose after _build_uniform_batch_dp_sync/dispatch_cg_and_sync_dp; tuple unpacking of a helper returning the DP-synced max (num_tokens_across_dp.max()) and its request count, fed as num_reqs to the uniform helper
    # expect: SG103
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        num_query_tokens = num_reqs * self.num_query_per_req
        _, num_dp_reqs = dp_padded_shape(
            batch_sync, num_query_tokens, self.num_query_per_req
        )
        return self._build_uniform_attn_metadata(
            num_reqs=num_dp_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: DFlashSpeculator.propose tail: batch_desc.num_tokens and num_tokens_across_dp go to slot mappings and the forward only; the helper gets the real num_reqs
    # expect: clean
    def _query_forward(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
        num_reqs: int,
    ) -> None:
        num_tokens_padded = batch_desc.num_tokens
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        draft_attn_metadata = self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        self._prepare_eplb_forward(num_reqs * self.num_query_per_req)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.query_cudagraph_manager is not None
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
            return
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


class AbsorbPaddingDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter that parks graph/DP padding on a trailing dummy request."""

    # idiom: v1 GPUModelRunner "dummy request absorbs the padding" trick: query_start_loc_np gets one extra entry equal to batch_desc.num_tokens, and the non-uniform helper reads query_start_loc_np[-1] as the token count
    # expect: SG103
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        qsl_np = np.empty(num_reqs + 2, dtype=np.int32)
        qsl_np[: num_reqs + 1] = self.arange_np[: num_reqs + 1] * self.num_query_per_req
        qsl_np[num_reqs + 1] = batch_desc.num_tokens
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=qsl_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: early return on eager/PIECEWISE with the real layout; only the FULL path lays out the padded graph rows (the helper then uses batch_desc.num_tokens anyway)
    # expect: clean
    def _graph_query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            return self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=self.num_query_per_req,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=self.num_query_per_req,
                causal=self._group_causal,
            )
        num_graph_reqs = batch_desc.num_tokens // self.num_query_per_req
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=self.arange_np[: num_graph_reqs + 1]
            * self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class InPlaceRefreshDFlash2Speculator(DFlash2Speculator):
    """DFlash2 drafter that sizes metadata for the captured in-place refresh."""

    # idiom: kwargs built with dict(...) and .update and passed as **kwargs; on the supports_decode_metadata_update path the descriptor is rebuilt by hand as BatchExecutionDescriptor(cg_mode=FULL, num_tokens=batch_desc.num_tokens, ...)
    # expect: SG103
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        md_kwargs: dict[str, Any] = dict(
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        if self.supports_decode_metadata_update:
            # The captured refresh writes graph-width buffers; build to match.
            md_kwargs.update(
                batch_desc=BatchExecutionDescriptor(
                    cg_mode=CUDAGraphMode.FULL,
                    num_tokens=batch_desc.num_tokens,
                    num_reqs=batch_desc.num_reqs,
                    uniform_token_count=self.num_query_per_req,
                )
            )
        else:
            md_kwargs.update(batch_desc=batch_desc)
        return self._build_uniform_attn_metadata(**md_kwargs)


class RankPaddedXPressSpeculator(XPressSpeculator):
    """XPress drafter that mirrors the DP rank's padded query width."""

    # idiom: DPSyncState.num_tokens_across_dp[dp_rank] (this rank's DP-synced count) read with a walrus and turned into num_reqs for the uniform helper
    # expect: SG103
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        num_query_tokens = num_reqs * self.num_query_per_req
        num_rows = num_reqs
        if batch_sync is not None and (
            rank_tokens := int(batch_sync.num_tokens_across_dp[self.dp_rank])
        ) != num_query_tokens:
            num_rows = rank_tokens // self.num_query_per_req
        return self._build_uniform_attn_metadata(
            num_reqs=num_rows,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: dispatch_cg_and_sync_dp result bound with a walrus and tested on THIS descriptor's cg_mode; padded rows only under FULL
    # expect: clean
    def _dispatch_and_build(
        self,
        input_batch: InputBatch,
        batch_sync: DPSyncState | None,
        num_reqs: int,
        is_profile: bool,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        num_query_tokens = num_reqs * self.num_query_per_req
        if (
            desc := dispatch_cg_and_sync_dp(
                self.query_cudagraph_manager,
                num_reqs,
                num_query_tokens,
                uniform_token_count=self.num_query_per_req,
                dp_size=self.dp_size,
                dp_rank=self.dp_rank,
                need_eager=is_profile,
                dp_sync_state=batch_sync,
            )[0]
        ).cg_mode == CUDAGraphMode.FULL:
            num_rows = desc.num_tokens // self.num_query_per_req
        else:
            num_rows = num_reqs
        attn_metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=desc,
            query_start_loc_np=self.arange_np[: num_rows + 1] * self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        return desc, attn_metadata


class TargetBucketDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter that keeps its query block in the target's bucket."""

    _query_md: Any = None

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
        self._query_md = partial(
            self._build_uniform_attn_metadata,
            num_query_per_req=self.num_query_per_req,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: functools.partial of the bound shared helper stored on self in set_attn and called later; num_reqs = min(input_batch.num_tokens_after_padding // q, max_num_reqs) (padded count clamped to capacity)
    # expect: SG103
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        num_rows = min(
            input_batch.num_tokens_after_padding // self.num_query_per_req,
            self.max_num_reqs,
        )
        return self._query_md(
            batch_desc=batch_desc,
            num_reqs=num_rows,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )

    # idiom: same stored functools.partial of the shared helper, called with the real request count (min(num_reqs, max_num_reqs))
    # expect: clean
    def _eager_query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._query_md(
            batch_desc=batch_desc,
            num_reqs=min(num_reqs, self.max_num_reqs),
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )


class GraphStateDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter that keeps the dispatch decision on a holder object."""

    _graph_state: DraftGraphState | None = None

    def _remember_dispatch(self, batch_desc: BatchExecutionDescriptor) -> None:
        self._graph_state = DraftGraphState(batch_desc, self.num_query_per_req)

    # idiom: holder object stored on self (DraftGraphState) read through its @property padded_num_reqs (batch_desc.num_tokens // q) as num_reqs of the uniform helper
    # expect: SG103
    def _query_attn_metadata(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any] | None:
        state = self._graph_state
        assert state is not None
        return self._build_uniform_attn_metadata(
            num_reqs=state.padded_num_reqs,
            batch_desc=state.batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: same holder, but the padded count is taken only when the holder's @property is_full (batch_desc.cg_mode == FULL) says this batch replays a FULL graph
    # expect: clean
    def _checked_query_attn_metadata(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any] | None:
        state = self._graph_state
        assert state is not None
        num_rows = state.padded_num_reqs if state.is_full else num_reqs
        return self._build_uniform_attn_metadata(
            num_reqs=num_rows,
            batch_desc=state.batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


# ---------------------------------------------------------------------------
# Builds outside the shared helper (SG101-class) variants
# ---------------------------------------------------------------------------


class AliasBuildDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter with the pre-refactor eager metadata path."""

    # idiom: pre-#55458 DFlashSpeculator._build_draft_attn_metadata body inlined in a method; the sink is called through an import alias (build_attn_metadata as _build_md), real token count
    # expect: SG101
    def _eager_query_metadata(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any]:
        num_query_tokens = num_reqs * self.num_query_per_req
        query_start_loc_np = self.arange_np[: num_reqs + 1] * self.num_query_per_req
        return _build_md(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_query_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            max_query_len=self.num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_query_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=self._group_causal,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound[:num_reqs]
            + self.num_query_per_req,
        )


class PartialBuildDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter that binds the sink's static arguments once."""

    _md_factory: Any = None

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
        self._md_factory = partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=kv_cache_config,
            causal=self._group_causal,
        )

    # idiom: functools.partial(build_attn_metadata, attn_groups=..., kv_cache_config=...) stored on the instance in set_attn and called here with the real query layout
    # expect: SG101
    def _query_metadata(self, input_batch: InputBatch, num_reqs: int) -> dict[str, Any]:
        num_query_tokens = num_reqs * self.num_query_per_req
        qsl_cpu = torch.from_numpy(
            self.arange_np[: num_reqs + 1] * self.num_query_per_req
        )
        return self._md_factory(
            num_reqs=num_reqs,
            num_tokens=num_query_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=qsl_cpu,
            max_query_len=self.num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_query_tokens],
        )


class PerGroupBuilderDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter that drives each KV group's builder directly."""

    # idiom: DFlashSpeculator.set_attn loop over group.get_metadata_builder() adjusting builder.aot_schedule; builders are touched but nothing is built
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
        self._builders_by_gid = {
            group.kv_cache_group_id: group.get_metadata_builder()
            for groups in self.attn_groups
            for group in groups
        }
        for builder in self._builders_by_gid.values():
            if getattr(builder, "aot_schedule", False):
                builder.aot_schedule = False  # type: ignore[attr-defined]

    # idiom: dict of metadata builders keyed by KV-cache group id (kept from set_attn), each driven with builder.build(0, CommonAttentionMetadata(...)) in a loop
    # expect: SG101
    def _query_metadata_per_group(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any]:
        num_query_tokens = num_reqs * self.num_query_per_req
        qsl_cpu = torch.from_numpy(
            self.arange_np[: num_reqs + 1] * self.num_query_per_req
        )
        attn_metadata: dict[str, Any] = {}
        for gid, builder in self._builders_by_gid.items():
            common = CommonAttentionMetadata(
                query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
                query_start_loc_cpu=qsl_cpu,
                seq_lens=self.input_buffers.seq_lens[:num_reqs],
                num_reqs=num_reqs,
                num_actual_tokens=num_query_tokens,
                max_query_len=self.num_query_per_req,
                max_seq_len=self.draft_max_seq_len,
                block_table_tensor=self.block_tables.input_block_tables[gid][:num_reqs],
                slot_mapping=self.block_tables.slot_mappings[gid, :num_query_tokens],
                causal=not self.requires_non_causal,
            )
            metadata = builder.build(0, common)
            for layer_name in self.kv_cache_config.kv_cache_groups[gid].layer_names:
                attn_metadata[layer_name] = metadata
        return attn_metadata


class HelperBuildDFlash2Speculator(DFlash2Speculator):
    """DFlash2 drafter using the fork's shared eager builder."""

    # idiom: a module-level builder in another module of the tree (_metadata.build_eager_draft_metadata, which calls build_attn_metadata) called from a speculator method
    # expect: SG101
    def _query_metadata(self, input_batch: InputBatch, num_reqs: int) -> dict[str, Any]:
        return build_eager_draft_metadata(
            self.attn_groups,
            self.kv_cache_config,
            self.input_buffers,
            self.block_tables,
            num_reqs,
            self.arange_np[: num_reqs + 1] * self.num_query_per_req,
            self.draft_max_seq_len,
            causal=self._group_causal,
        )


class MixinEagleSpeculator(EagerMetadataMixin, EagleSpeculator):
    """EAGLE drafter with the eager single-token decode build mixed in."""

    # idiom: the build lives in a mixin base (EagerMetadataMixin._eager_decode_metadata -> build_attn_metadata) reached through self in the EAGLE decode path
    # expect: SG101
    def _decode_metadata(self, num_reqs: int, skip_attn: bool) -> dict[str, Any] | None:
        if skip_attn:
            return None
        return self._eager_decode_metadata(num_reqs)


# idiom: module-level function of a speculator module driving AttentionGroup.build_metadata per group (what build_attn_metadata does inside), called by drafters for eager query blocks
# expect: SG101
def _query_metadata_via_groups(
    attn_groups: list[list[AttentionGroup]],
    common_by_gid: Mapping[int, CommonAttentionMetadata],
) -> dict[str, Any]:
    attn_metadata: dict[str, Any] = {}
    for gid, groups in enumerate(attn_groups):
        common = common_by_gid.get(gid)
        if common is None:
            continue
        for group in groups:
            metadata = group.build_metadata(common)
            attn_metadata.update(dict.fromkeys(group.layer_names, metadata))
    return attn_metadata


# idiom: dflash/cudagraph.py _prepare_dflash_inputs_to_capture: module-level capture-time builder in a speculator module, build_attn_metadata(..., for_cudagraph_capture=True) on a dummy InputBatch
# expect: clean
def _capture_query_metadata(
    num_reqs: int,
    num_tokens: int,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
    causal: bool | Mapping[int, bool],
) -> dict[str, Any]:
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    slot_mappings = block_tables.get_dummy_slot_mappings(num_tokens)
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=num_tokens // num_reqs,
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_model_len,
        block_tables=block_tables.get_dummy_block_tables(num_reqs),
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
        causal=causal,
    )
