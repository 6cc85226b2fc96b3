"""SG101 cases: speculators that build attention metadata themselves instead
of going through ``DraftModelSpeculator._build_attn_metadata``."""

from __future__ import annotations

import functools
from typing import Any

import torch

from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu import attn_utils as gpu_attn_utils
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.utils import AttentionGroup

from .base import BlindARBase


def _uniform_common_metadata(
    spec: BlindARBase, num_reqs: int, step: int
) -> CommonAttentionMetadata:
    """Real-count CommonAttentionMetadata for a one-token-per-request step."""
    query_start_loc_cpu = torch.from_numpy(spec.arange_np[: num_reqs + 1])
    return CommonAttentionMetadata(
        query_start_loc=spec.input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=query_start_loc_cpu,
        seq_lens=spec.input_buffers.seq_lens[:num_reqs],
        num_reqs=num_reqs,
        num_actual_tokens=num_reqs,
        max_query_len=1,
        max_seq_len=spec.max_model_len,
        block_table_tensor=spec.block_tables.input_block_tables[0][:num_reqs],
        slot_mapping=spec.block_tables.slot_mappings[0, :num_reqs],
    )


class DirectBuildMTP(MTPSpeculator):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py _prepare_dflash_inputs_to_capture
    # expect: SG101
    def _draft_prefill_metadata(
        self, input_batch: InputBatch, num_reqs: int
    ) -> dict[str, Any]:
        query_start_loc_cpu = torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=input_batch.num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=[
                x[:num_reqs] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, : input_batch.num_tokens],
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )


class BuilderLoopEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/attn_utils.py build_attn_metadata
    # expect: SG101
    def _group_metadata(self, num_reqs: int, step: int) -> dict[str, Any]:
        common = _uniform_common_metadata(self, num_reqs, step)
        attn_metadata: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                builder = group.get_metadata_builder()
                metadata = builder.build(
                    common_prefix_len=0, common_attn_metadata=common
                )
                for layer_name in group.layer_names:
                    attn_metadata[layer_name] = metadata
        return attn_metadata


class BuilderDictEagle(BlindARBase):
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
        self._groups_by_id = {
            group.kv_cache_group_id: group
            for groups in self.attn_groups
            for group in groups
        }
        self._md_builders = dict(
            uniform=self._build_uniform_attn_metadata,
            varlen=self._build_attn_metadata,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/utils.py AttentionGroup.build_metadata
    # expect: SG101
    def _metadata_by_group(self, num_reqs: int, step: int) -> dict[str, Any]:
        common = _uniform_common_metadata(self, num_reqs, step)
        attn_metadata: dict[str, Any] = {}
        for gid, group in self._groups_by_id.items():
            metadata = group.build_metadata(common)
            attn_metadata.update(dict.fromkeys(group.layer_names, metadata))
        return attn_metadata

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: clean
    def _metadata_by_kind(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        build = self._md_builders["uniform"]
        return build(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class PartialDirectMTP(BlindARBase):
    def _bind_direct_builder(self) -> None:
        self._direct_md = functools.partial(
            build_attn_metadata,
            attn_groups=self.attn_groups,
            kv_cache_config=self.kv_cache_config,
        )
        self._helper_md = functools.partial(
            self._build_uniform_attn_metadata, num_query_per_req=1
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_backend.py FlashInferAttnBackend.init_forward_metadata_out_graph
    # expect: SG101
    def _partial_direct_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any]:
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        return self._direct_md(
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs] + step,
        )

    # idiom: sgl-project/sglang python/sglang/srt/layers/attention/flashinfer_backend.py FlashInferAttnBackend.init_forward_metadata_out_graph
    # expect: clean
    def _partial_helper_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        return self._helper_md(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class ModuleAliasEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/model_states/default.py DefaultModelState.prepare_attn
    # expect: SG101
    def _aliased_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any]:
        make_metadata = gpu_attn_utils.build_attn_metadata
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        return make_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_reqs,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=1,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_reqs],
            kv_cache_config=self.kv_cache_config,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs] + step,
        )


class DraftingBuildEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/utils.py AttentionGroup.build_metadata_for_drafting
    # expect: SG101
    def _drafting_metadata(self, num_reqs: int, step: int) -> dict[str, Any]:
        common = _uniform_common_metadata(self, num_reqs, step)
        builders = [group for groups in self.attn_groups for group in groups]
        attn_metadata: dict[str, Any] = {}
        for group in builders:
            metadata = group.build_metadata_for_drafting(common, draft_index=step)
            for layer_name in group.layer_names:
                attn_metadata[layer_name] = metadata
        return attn_metadata


class TunedBuilderEagle(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.set_attn
    # expect: clean
    def _tuned_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any] | None:
        # Builders are touched only to switch off the AOT schedule; the build
        # itself goes through the shared helper.
        for groups in self.attn_groups:
            for group in groups:
                builder = group.get_metadata_builder()
                if getattr(builder, "aot_schedule", False):
                    builder.aot_schedule = False  # type: ignore[attr-defined]
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class WrappedHelperMTP(BlindARBase):
    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _build_attn_metadata(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        # Extends the shared helper; the build still happens in the base.
        attn_metadata = super()._build_attn_metadata(*args, **kwargs)
        if attn_metadata is not None:
            self._last_draft_layers = sorted(attn_metadata)
        return attn_metadata
