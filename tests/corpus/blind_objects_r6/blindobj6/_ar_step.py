# SPDX-License-Identifier: Apache-2.0
"""Pieces of ``TargetDependentARSpeculator._multi_step_decode`` the fork's AR
drafters share, so each drafter only restates the metadata build."""

from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor


class DecodeStepMixin:
    """Mixed in front of a TargetDependentARSpeculator subclass."""

    def _decode_slot_mappings(
        self, num_reqs: int, batch_desc: BatchExecutionDescriptor
    ) -> dict[str, torch.Tensor]:
        slot_mappings = self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc[: num_reqs + 1],
            self.input_buffers.positions[:num_reqs],
            batch_desc.num_tokens,
        )
        return build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config)

    def _run_decode_step(
        self,
        step: int,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        attn_metadata: dict[str, Any] | None,
        slot_mappings_by_layer: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        num_speculative_steps: int,
    ) -> None:
        self.current_draft_step.fill_(step)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return
        self._generate_draft(
            num_reqs,
            batch_desc.num_tokens,
            attn_metadata,
            slot_mappings_by_layer,
            num_tokens_across_dp=num_tokens_across_dp,
            cudagraph_runtime_mode=batch_desc.cg_mode,
            num_speculative_steps=num_speculative_steps,
        )
