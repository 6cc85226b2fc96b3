# SPDX-License-Identifier: Apache-2.0
"""Draft workers that assemble their own eager-step attention metadata.

Carried in the fork while some draft backends lacked in-place decode
metadata refresh; most of these predate the shared helpers on
DraftModelSpeculator.
"""

from collections.abc import Mapping
from functools import partial
from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata as _attn_md
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.gemma4.speculator import Gemma4Speculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)
from vllm.v1.worker.utils import AttentionGroup

from blindobj3 import metadata_shims

logger = init_logger(__name__)


class EagerQueryDFlashSpeculator(DFlashSpeculator):
    """DFlash whose query block is built eagerly when FULL graphs are off."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata (inlined into a DFlash subclass)
    # expect: SG101
    def _build_query_metadata(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any]:
        num_tokens = num_reqs * self.num_query_per_req
        query_start_loc_np = self.arange_np[: num_reqs + 1] * self.num_query_per_req
        draft_seq_lens_cpu_upper_bound = (
            seq_lens_cpu_upper_bound[:num_reqs] + self.num_query_per_req
        ).clamp_(max=self.max_model_len)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            max_query_len=self.num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=self._group_causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_cpu_upper_bound,
            positions=self.input_buffers.positions[:num_tokens],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture
    # expect: clean
    def _build_capture_metadata(self, num_reqs: int) -> dict[str, Any]:
        num_tokens = num_reqs * self.num_query_per_req
        input_batch = InputBatch.make_dummy(num_reqs, num_tokens, self.input_buffers)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc,
            query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
            max_query_len=self.num_query_per_req,
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=self.block_tables.get_dummy_block_tables(num_reqs),
            slot_mappings=self.block_tables.get_dummy_slot_mappings(num_tokens),
            kv_cache_config=self.kv_cache_config,
            for_cudagraph_capture=True,
            causal=self._group_causal,
        )


class PerStepMTPSpeculator(MTPSpeculator):
    """MTP that rebuilds its decode metadata per step without the helper."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG101
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
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        idx_mapping = self.idx_mapping[:num_reqs]
        block_tables = [x[:num_reqs] for x in self.block_tables.input_block_tables]

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
                step_upper_bound = (seq_lens_cpu_upper_bound[:num_reqs] + step).clamp(
                    max=self.max_model_len
                )
                attn_metadata = _attn_md(
                    attn_groups=self.attn_groups,
                    num_reqs=num_reqs,
                    num_tokens=num_reqs,
                    query_start_loc_gpu=query_start_loc,
                    query_start_loc_cpu=query_start_loc_cpu,
                    max_query_len=1,
                    seq_lens=self.input_buffers.seq_lens[:num_reqs],
                    max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
                    block_tables=block_tables,
                    slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
                    kv_cache_config=self.kv_cache_config,
                    seq_lens_cpu_upper_bound=step_upper_bound,
                    positions=positions,
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


class UniformAliasMTPSpeculator(MTPSpeculator):
    """Same loop as PerStepMTPSpeculator, through the shared helper."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
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
        build = self._build_uniform_attn_metadata

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
                attn_metadata = build(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
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


class PartialBuildStandaloneSpeculator(StandaloneARSpeculator):
    """Standalone AR drafter that binds the static build arguments once."""

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
        self._draft_md = partial(
            build_attn_metadata,
            self.attn_groups,
            kv_cache_config=kv_cache_config,
            causal=True,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode (decode_attn_md)
    # expect: SG101
    def _decode_step_metadata(
        self,
        num_reqs: int,
        step: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any]:
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        return self._draft_md(
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            # Include the correction token inserted during prefill.
            seq_lens_cpu_upper_bound=(
                seq_lens_cpu_upper_bound[:num_reqs] + step + 1
            ).clamp(max=self.max_model_len),
        )


class PartialHelperStandaloneSpeculator(StandaloneARSpeculator):
    """Standalone AR drafter binding the shared helper instead."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._decode_md = partial(
            self._build_uniform_attn_metadata, num_query_per_req=1
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode (decode_attn_md)
    # expect: clean
    def _decode_step_metadata(
        self,
        num_reqs: int,
        step: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        return self._decode_md(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            # Include the correction token inserted during prefill.
            step=step + 1,
        )


class Gemma4ReuseSpeculator(Gemma4Speculator):
    """Gemma4 MTP building its shared-KV decode metadata group by group."""

    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (per-group AttentionGroup.build_metadata loop)
    # expect: SG101
    def _shared_kv_decode_metadata(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any]:
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        attn_metadata: dict[str, Any] = {}
        for kv_cache_group_id, groups in enumerate(self.attn_groups):
            if not groups:
                continue
            common_attn_metadata = CommonAttentionMetadata(
                query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
                query_start_loc_cpu=query_start_loc_cpu,
                seq_lens=self.input_buffers.seq_lens[:num_reqs],
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs],
                max_seq_len=self.max_model_len,
                num_reqs=num_reqs,
                num_actual_tokens=num_reqs,
                max_query_len=1,
                block_table_tensor=self.block_tables.input_block_tables[
                    kv_cache_group_id
                ][:num_reqs],
                slot_mapping=self.block_tables.slot_mappings[
                    kv_cache_group_id, :num_reqs
                ],
            )
            for group in groups:
                metadata = group.build_metadata(common_attn_metadata)
                for layer_name in group.layer_names:
                    attn_metadata[layer_name] = metadata
        return attn_metadata

    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (for_cudagraph_capture branch)
    # expect: clean
    def _capture_shared_kv_metadata(self, num_reqs: int) -> dict[str, Any]:
        input_batch = InputBatch.make_dummy(num_reqs, num_reqs, self.input_buffers)
        dummy_block_tables = self.block_tables.get_dummy_block_tables(num_reqs)
        dummy_slot_mappings = self.block_tables.get_dummy_slot_mappings(num_reqs)
        attn_metadata: dict[str, Any] = {}
        for kv_cache_group_id, groups in enumerate(self.attn_groups):
            common_attn_metadata = CommonAttentionMetadata(
                query_start_loc=input_batch.query_start_loc,
                query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
                seq_lens=input_batch.seq_lens,
                max_seq_len=self.max_model_len,
                num_reqs=num_reqs,
                num_actual_tokens=num_reqs,
                max_query_len=1,
                block_table_tensor=dummy_block_tables[kv_cache_group_id],
                slot_mapping=dummy_slot_mappings[kv_cache_group_id],
            )
            for group in groups:
                metadata = group.build_metadata_for_cudagraph_capture(
                    common_attn_metadata
                )
                attn_metadata.update(dict.fromkeys(group.layer_names, metadata))
        return attn_metadata


class DraftIndexDFlash2Speculator(DFlash2Speculator):
    """DFlash2 that asks each builder for its drafting-specialised metadata."""

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
        self._groups_by_leader: dict[str, AttentionGroup] = {
            group.layer_names[0]: group
            for groups in self.attn_groups
            for group in groups
        }

    # idiom: vllm/v1/worker/utils.py AttentionGroup.build_metadata_for_drafting
    # expect: SG101
    def _drafting_metadata(
        self,
        common_by_group: Mapping[int, CommonAttentionMetadata],
        draft_index: int,
    ) -> dict[str, Any]:
        per_layer: dict[str, Any] = {}
        for leader, group in self._groups_by_leader.items():
            common = common_by_group[group.kv_cache_group_id]
            metadata = group.build_metadata_for_drafting(common, draft_index=draft_index)
            logger.debug("drafting metadata for group led by %s", leader)
            per_layer.update(dict.fromkeys(group.layer_names, metadata))
        return per_layer

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata
    # expect: clean
    def _refresh_decode_metadata(self, attn_metadata: dict[str, Any]) -> None:
        for group in self._groups_by_leader.values():
            if group.supports_draft_decode_metadata_update:
                group.update_draft_decode_metadata(attn_metadata)


class RefineDSparkSpeculator(DSparkSpeculator):
    """DSpark with an extra eager refinement pass over the query block."""

    # idiom: vllm/v1/attention/backend.py AttentionMetadataBuilder.build_for_drafting (per-builder closure)
    # expect: SG101
    def _refine_metadata(
        self,
        common_attn_metadata: CommonAttentionMetadata,
        refine_round: int,
    ) -> dict[str, Any]:
        def _for_group(group: AttentionGroup) -> Any:
            builder = group.get_metadata_builder()
            return builder.build_for_drafting(
                common_attn_metadata, draft_index=refine_round
            )

        out: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                metadata = _for_group(group)
                for layer_name in group.layer_names:
                    out[layer_name] = metadata
        return out


class RebuildPrefillEagleSpeculator(EagleSpeculator):
    """EAGLE that rebuilds draft-prefill metadata instead of reusing the
    target's (needed when the draft has its own KV cache group layout)."""

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.propose (draft prefill metadata)
    # expect: SG101
    def _rebuild_prefill_metadata(self, input_batch: InputBatch) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        return metadata_shims.eager_draft_metadata(
            self.attn_groups,
            self.kv_cache_config,
            self.block_tables,
            self.input_buffers,
            num_reqs,
            input_batch.query_start_loc_np,
            input_batch.seq_lens_cpu_upper_bound,
            max_seq_len=self.draft_max_seq_len,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator.capture
    # expect: clean
    def _capture_prefill_metadata(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        return metadata_shims.capture_draft_metadata(
            self.attn_groups,
            self.kv_cache_config,
            self.block_tables,
            self.input_buffers,
            num_reqs,
            num_tokens,
            self.max_model_len,
        )
