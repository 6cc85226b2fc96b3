# SPDX-License-Identifier: Apache-2.0
"""Shared bases for the fork's draft speculators."""

from __future__ import annotations

from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from blindobj4._attn_common import weakest_cg_support
from blindobj4._dcp import local_lens_view

logger = init_logger(__name__)


class StatefulEagleBase(EagleSpeculator):
    """Eagle drafter that remembers the decode batch it dispatched."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._decode_desc: BatchExecutionDescriptor | None = None
        self._decode_reqs: int = 0

    def _remember_decode_batch(
        self, batch_desc: BatchExecutionDescriptor, num_reqs: int
    ) -> None:
        self._decode_desc = batch_desc
        self._decode_reqs = num_reqs

    @property
    def _decode_num_reqs(self) -> int:
        desc = self._decode_desc
        if desc is not None and desc.num_reqs:
            return desc.num_reqs
        return self._decode_reqs

    @property
    def _decode_num_reqs_actual(self) -> int:
        return self._decode_reqs

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: SG103
    def _decode_step_metadata(
        self, step: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> dict[str, Any] | None:
        assert self._decode_desc is not None
        return self._build_uniform_attn_metadata(
            batch_desc=self._decode_desc,
            num_reqs=self._decode_num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._multi_step_decode
    # expect: clean
    def _decode_step_metadata_exact(
        self, step: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> dict[str, Any] | None:
        assert self._decode_desc is not None
        return self._build_uniform_attn_metadata(
            batch_desc=self._decode_desc,
            num_reqs=self._decode_num_reqs_actual,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py TargetDependentARSpeculator._fused_multi_step_decode
    # expect: clean
    def _decode_step_metadata_graph(
        self, step: int, seq_lens_cpu_upper_bound: torch.Tensor
    ) -> dict[str, Any] | None:
        desc = self._decode_desc
        assert desc is not None
        if desc.cg_mode == CUDAGraphMode.FULL:
            num_reqs = self._decode_num_reqs
        else:
            num_reqs = self._decode_num_reqs_actual
        return self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
        )


class ManualMetadataBase(DraftModelSpeculator):
    """Base for drafters that keep their own per-group metadata."""

    def _common_for_decode(self, num_reqs: int) -> CommonAttentionMetadata:
        query_start_loc_cpu = torch.from_numpy(self.arange_np[: num_reqs + 1])
        return CommonAttentionMetadata(
            query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            num_reqs=num_reqs,
            num_actual_tokens=num_reqs,
            max_query_len=1,
            max_seq_len=self.draft_max_seq_len,
            block_table_tensor=self.block_tables.input_block_tables[0][:num_reqs],
            slot_mapping=self.block_tables.slot_mappings[0, :num_reqs],
        )

    # idiom: vllm/v1/worker/gpu/attn_utils.py build_attn_metadata (per-group loop)
    # expect: SG101
    def _rebuild_group_metadata(
        self, common_attn_metadata: CommonAttentionMetadata
    ) -> dict[str, Any]:
        attn_metadata: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                metadata = group.build_metadata(common_attn_metadata)
                attn_metadata.update((name, metadata) for name in group.layer_names)
        return attn_metadata

    # idiom: vllm/v1/worker/gpu/attn_utils.py get_attn_cg_support
    # expect: clean
    def _group_cg_support_name(self) -> str:
        support = weakest_cg_support(self.attn_groups, self.attn_vllm_config)
        return support.name


class DCPAwareDFlashBase(DFlashSpeculator):
    """DFlash base that tracks the draft's DCP-local lengths."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata (dcp branch)
    # expect: SG104
    def _prepare_local_lens(self, num_reqs: int) -> torch.Tensor | None:
        if self.dcp_size <= 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.set_attn (layout logging)
    # expect: clean
    def _log_local_lens(self, num_reqs: int) -> None:
        if self.dcp_size <= 1:
            return
        lens = local_lens_view(self.input_buffers, num_reqs)
        logger.debug(
            "%s draft dcp-local lens (rank %d): %s",
            self._speculator_name,
            self.block_tables.cp_rank,
            lens.tolist(),
        )
