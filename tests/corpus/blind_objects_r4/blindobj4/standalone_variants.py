# SPDX-License-Identifier: Apache-2.0
"""Standalone-AR drafter variants."""

from __future__ import annotations

from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.utils.math_utils import round_up
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)

logger = init_logger(__name__)


class GraphClaimingStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill
    # expect: SG103
    def _prefill_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        total_expanded: int,
        prefill_slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        qsl_np = input_batch.query_start_loc_np
        query_start_loc_np = qsl_np[: num_reqs + 1] + self.arange_np[: num_reqs + 1]
        batch_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.FULL,
            num_tokens=round_up(total_expanded, 8),
            num_reqs=num_reqs,
        )
        return self._build_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=prefill_slot_mappings,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._prefill
    # expect: clean
    def _prefill_metadata_eager(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        total_expanded: int,
        prefill_slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        qsl_np = input_batch.query_start_loc_np
        query_start_loc_np = qsl_np[: num_reqs + 1] + self.arange_np[: num_reqs + 1]
        batch_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE,
            num_tokens=total_expanded,
            num_reqs=num_reqs,
        )
        return self._build_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=prefill_slot_mappings,
        )


class GroupLoopStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/utils.py AttentionGroup.build_metadata_for_drafting
    # expect: SG101
    def _decode_metadata(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any]:
        common = CommonAttentionMetadata(
            query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(self.arange_np[: num_reqs + 1]),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            num_reqs=num_reqs,
            num_actual_tokens=num_reqs,
            max_query_len=1,
            max_seq_len=self.max_model_len,
            block_table_tensor=self.block_tables.input_block_tables[0][:num_reqs],
            slot_mapping=self.block_tables.slot_mappings[0, :num_reqs],
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs] + step + 1,
        )
        attn_metadata: dict[str, Any] = {}
        for groups in self.attn_groups:
            for group in groups:
                md = group.build_metadata_for_drafting(common, step)
                attn_metadata.update(dict.fromkeys(group.layer_names, md))
        return attn_metadata

    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode
    # expect: clean
    def _decode_metadata_shared(
        self, num_reqs: int, seq_lens_cpu_upper_bound: torch.Tensor, step: int
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step + 1,
        )


class PrefillDCPStandaloneSpeculator(StandaloneARSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._prefill_dcp_lens: torch.Tensor | None = None

    def _after_prefill(self, num_reqs: int) -> None:
        if self.dcp_size > 1:
            self._prefill_dcp_lens = self.input_buffers.dcp_local_seq_lens[
                :num_reqs
            ].clone()

    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode
    # expect: SG105
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
            dcp_local_seq_lens=self._prefill_dcp_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode
    # expect: clean
    def _decode_step_metadata_fresh(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        if self._prefill_dcp_lens is not None:
            logger.debug(
                "prefill dcp-local lens kept for %d requests",
                self._prefill_dcp_lens.shape[0],
            )
        return self._build_uniform_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
        )


class KwargsDCPStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/standalone_ar/speculator.py StandaloneARSpeculator._multi_step_decode
    # expect: SG104
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        md_kwargs: dict[str, Any] = dict(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=num_reqs,
                num_reqs=num_reqs,
                uniform_token_count=1,
            ),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
        )
        if self.block_tables.cp_size > 1:
            dcp_args = (
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            md_kwargs["dcp_local_seq_lens"] = prepare_dcp_local_seq_lens(
                *dcp_args, num_reqs_padded=num_reqs
            )
        return self._build_uniform_attn_metadata(**md_kwargs)
