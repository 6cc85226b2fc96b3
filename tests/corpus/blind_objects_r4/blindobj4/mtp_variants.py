# SPDX-License-Identifier: Apache-2.0
"""MTP drafters that manage their own decode metadata plumbing."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionMetadataBuilder, CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.utils import AttentionGroup

from blindobj4._attn_common import build_groups_for_drafting, layer_names_by_group
from blindobj4.base import ManualMetadataBase

logger = init_logger(__name__)


class DirectBuildMTPSpeculator(MTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG101
    def _build_decode_metadata(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any]:
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        seq_lens_upper = (seq_lens_cpu_upper_bound[:num_reqs] + step).clamp_(
            max=self.max_model_len
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=seq_lens_upper,
            positions=self.input_buffers.positions[:num_reqs],
            is_prefilling=self.draft_is_prefilling[:num_reqs],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode (slot mappings)
    # expect: clean
    def _build_decode_slot_mappings(
        self, num_reqs: int, batch_desc: BatchExecutionDescriptor
    ) -> dict[str, torch.Tensor]:
        slot_mappings = self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc[: num_reqs + 1],
            self.input_buffers.positions[:num_reqs],
            batch_desc.num_tokens,
        )
        return build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config)


class KwargsBuildMTPSpeculator(MTPSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._md_common: dict[str, Any] = {}

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
        self._md_common.update(
            attn_groups=self.attn_groups,
            kv_cache_config=kv_cache_config,
            max_query_len=1,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: SG101
    def _decode_md(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any]:
        per_call = dict(
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1]),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs] + step,
        )
        return build_attn_metadata(**self._md_common, **per_call)


class PartialBuildMTPSpeculator(MTPSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._raw_build: Callable[..., dict[str, Any]] | None = None

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
        self._raw_build = partial(
            build_attn_metadata, self.attn_groups, kv_cache_config=kv_cache_config
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG101
    def _decode_md(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any]:
        assert self._raw_build is not None
        return self._raw_build(
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1]),
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs] + step,
        )


class PartialHelperMTPSpeculator(MTPSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._decode_md_fn: Callable[..., dict[str, Any] | None] = partial(
            self._build_uniform_attn_metadata, num_query_per_req=1
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_md(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        return self._decode_md_fn(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class BuilderDictMTPSpeculator(MTPSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._builders: dict[int, AttentionMetadataBuilder] = {}

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

    # idiom: vllm/v1/attention/backend.py AttentionMetadataBuilder.build_for_drafting
    # expect: SG101
    def _draft_metadata_for_group(
        self, kv_cache_group_id: int, common: CommonAttentionMetadata, step: int
    ) -> Any:
        builder = self._builders.get(kv_cache_group_id)
        if builder is None:
            return None
        return builder.build_for_drafting(common, draft_index=step)

    # idiom: vllm/v1/worker/utils.py AttentionGroup.supports_draft_decode_metadata_update
    # expect: clean
    def _group_supports_update(self, kv_cache_group_id: int) -> bool:
        builder = self._builders.get(kv_cache_group_id)
        return builder is not None and builder.supports_draft_decode_metadata_update


class PropertyBuilderMTPSpeculator(MTPSpeculator):
    @property
    def _primary_builder(self) -> AttentionMetadataBuilder:
        gid = next(i for i, groups in enumerate(self.attn_groups) if groups)
        return self.attn_groups[gid][0].get_metadata_builder()

    # idiom: vllm/v1/attention/backend.py AttentionMetadataBuilder.build (fast_build for drafting)
    # expect: SG101
    def _fast_decode_metadata(self, common: CommonAttentionMetadata) -> dict[str, Any]:
        builder = self._primary_builder
        metadata = builder.build(
            common_prefix_len=0, common_attn_metadata=common, fast_build=True
        )
        return {name: metadata for name in self.draft_attn_layer_names}

    # idiom: vllm/v1/worker/gpu/attn_utils.py get_attn_cg_support
    # expect: clean
    def _primary_cg_support_name(self) -> str:
        builder = self._primary_builder
        gid = next(i for i, groups in enumerate(self.attn_groups) if groups)
        support = builder.get_cudagraph_support(
            self.attn_vllm_config, self.attn_groups[gid][0].kv_cache_spec
        )
        return support.name


class HelperBuildMTPSpeculator(MTPSpeculator, ManualMetadataBase):
    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (drafting builders)
    # expect: SG101
    def _decode_metadata_via_groups(self, num_reqs: int, step: int) -> dict[str, Any]:
        common = self._common_for_decode(num_reqs)
        return build_groups_for_drafting(self.attn_groups, common, step)

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator.load_model (layer bookkeeping)
    # expect: clean
    def _log_group_layout(self) -> None:
        for gid, names in layer_names_by_group(self.attn_groups).items():
            logger.debug("draft kv group %d: %d layers", gid, len(names))


class CaptureWarmMTPSpeculator(MTPSpeculator, ManualMetadataBase):
    # idiom: vllm/v1/worker/gpu/cudagraph_utils.py prepare_inputs_to_capture
    # expect: SG101
    def _warm_capture_metadata(self, num_reqs: int) -> dict[str, Any]:
        common = self._common_for_decode(num_reqs)
        attn_metadata: dict[str, Any] = {}
        for groups in self.attn_groups:
            for attn_group in groups:
                metadata = attn_group.build_metadata_for_cudagraph_capture(common)
                for layer_name in attn_group.layer_names:
                    attn_metadata[layer_name] = metadata
        return attn_metadata

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.capture
    # expect: clean
    def _capture_decode_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        self.idx_mapping.zero_()
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=1,
        )


class NamedStepMTPSpeculator(MTPSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _build_metadata_for_step(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        kwargs: dict[str, Any] = dict(
            batch_desc=batch_desc,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )
        kwargs.update(num_reqs=num_reqs, step=step)
        return self._build_uniform_attn_metadata(**kwargs)

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _build_metadata_for_graph_step(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        kwargs: dict[str, Any] = dict(
            batch_desc=batch_desc,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
        )
        kwargs.update(num_reqs=batch_desc.num_reqs or num_reqs, step=step)
        return self._build_uniform_attn_metadata(**kwargs)
