# SPDX-License-Identifier: Apache-2.0
"""Intermediate drafter classes shared by the fork's production drafters."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

logger = init_logger(__name__)


class EagerFallbackEagleBase(EagleSpeculator):
    """EAGLE base for checkpoints whose draft attention cannot update decode
    metadata in place; subclasses pick when to take the eager fallback."""

    def _decode_common_metadata(
        self,
        kv_cache_group_id: int,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> CommonAttentionMetadata:
        query_start_loc_np = self.arange_np[: num_reqs + 1]
        return CommonAttentionMetadata(
            query_start_loc=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            seq_lens_cpu_upper_bound=(seq_lens_cpu_upper_bound[:num_reqs] + step).clamp(
                max=self.max_model_len
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            num_reqs=num_reqs,
            num_actual_tokens=num_reqs,
            max_query_len=1,
            block_table_tensor=self.block_tables.input_block_tables[kv_cache_group_id][
                :num_reqs
            ],
            slot_mapping=self.block_tables.slot_mappings[kv_cache_group_id, :num_reqs],
        )

    # idiom: vllm/v1/worker/utils.py AttentionGroup.build_metadata -> AttentionMetadataBuilder.build
    # expect: SG101
    def _eager_metadata(
        self,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> dict[str, Any]:
        attn_metadata: dict[str, Any] = {}
        for kv_cache_group_id, groups in enumerate(self.attn_groups):
            if not groups:
                continue
            common = self._decode_common_metadata(
                kv_cache_group_id, num_reqs, seq_lens_cpu_upper_bound, step
            )
            for group in groups:
                builder = group.get_metadata_builder(0)
                metadata = builder.build(0, common)
                attn_metadata.update(dict.fromkeys(group.layer_names, metadata))
        return attn_metadata


class LoggedDFlashSpeculator(DFlashSpeculator):
    """DFlash that logs every query-block metadata build (debug builds)."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
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
        result = super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )
        logger.debug(
            "%s query metadata: reqs=%d mode=%s layers=%d",
            self._speculator_name,
            num_reqs,
            batch_desc.cg_mode,
            0 if result is None else len(result),
        )
        return result


def _max_query_len(query_start_loc_np: np.ndarray, num_reqs: int) -> int:
    return int(np.diff(query_start_loc_np[: num_reqs + 1]).max())
