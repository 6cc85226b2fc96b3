"""Intermediate base speculator for the corpus.

It stores batch descriptors, counts and DCP lengths on ``self`` so that
subclasses in other modules read values decided here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator import (
    TargetDependentARSpeculator,
)

from .padding import DraftPaddingPolicy, qsl_with_padding_request


class BlindARBase(TargetDependentARSpeculator):
    """EAGLE/MTP-style speculator with a few stored per-batch values."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.pad_policy = DraftPaddingPolicy.from_vllm_config(vllm_config)
        self.prefill_desc: BatchExecutionDescriptor | None = None
        self.decode_desc: BatchExecutionDescriptor | None = None
        # Padded and real token counts of the current draft decode batch.
        self.padded_decode_tokens = 0
        self.real_decode_tokens = 0
        self.decode_tokens_across_dp: torch.Tensor | None = None
        # DCP-local lengths of the *target* batch, kept for the draft.
        self.target_dcp_local_seq_lens: torch.Tensor | None = None
        # Descriptor the attention metadata is built against (see subclasses).
        self.attn_desc: BatchExecutionDescriptor | None = None

    def propose(
        self,
        input_batch: InputBatch,
        attn_metadata: dict[str, Any],
        slot_mappings: dict[str, torch.Tensor],
        last_hidden_states: torch.Tensor,
        aux_hidden_states: list[torch.Tensor] | None,
        num_sampled: torch.Tensor,
        num_rejected: torch.Tensor,
        last_sampled: torch.Tensor,
        next_prefill_tokens: torch.Tensor,
        temperature: torch.Tensor,
        seeds: torch.Tensor,
        dp_sync_state: DPSyncState | None = None,
        dummy_run: bool = False,
        skip_attn_for_dummy_run: bool = False,
        mm_inputs: tuple[list[torch.Tensor], torch.Tensor] | None = None,
        is_profile: bool = False,
        num_speculative_tokens: int | None = None,
    ) -> torch.Tensor:
        if self.prefill_cudagraph_manager is not None and not is_profile:
            # This rank's own view of the draft-prefill shape (no DP sync).
            prefill_desc = self.prefill_cudagraph_manager.dispatch(
                input_batch.num_reqs,
                input_batch.num_tokens_after_padding,
                None,
                0,
            )
            self._record_prefill(input_batch, prefill_desc)
        return super().propose(
            input_batch,
            attn_metadata,
            slot_mappings,
            last_hidden_states,
            aux_hidden_states,
            num_sampled,
            num_rejected,
            last_sampled,
            next_prefill_tokens,
            temperature,
            seeds,
            dp_sync_state=dp_sync_state,
            dummy_run=dummy_run,
            skip_attn_for_dummy_run=skip_attn_for_dummy_run,
            mm_inputs=mm_inputs,
            is_profile=is_profile,
            num_speculative_tokens=num_speculative_tokens,
        )

    def _record_prefill(
        self, input_batch: InputBatch, prefill_desc: BatchExecutionDescriptor
    ) -> None:
        self.prefill_desc = prefill_desc
        # Target-model lengths: correct for the target batch only.
        self.target_dcp_local_seq_lens = input_batch.dcp_local_seq_lens

    def _dispatch_decode(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None = None,
        is_profile: bool = False,
    ) -> BatchExecutionDescriptor:
        batch_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(dp_sync_state, num_reqs, 1)
            if dp_sync_state is not None
            else (None, num_reqs)
        )
        desc, sync = dispatch_cg_and_sync_dp(
            self.decode_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=batch_sync,
        )
        self.decode_desc = desc
        self.padded_decode_tokens = desc.num_tokens
        self.real_decode_tokens = num_reqs
        self.decode_tokens_across_dp = (
            sync.num_tokens_across_dp if sync is not None else None
        )
        return desc

    def _pin_attn_desc_to_graph(self) -> None:
        # Attention is always built for the captured (FULL) shape.
        assert self.decode_desc is not None
        self.attn_desc = replace(self.decode_desc, cg_mode=CUDAGraphMode.FULL)

    def _keep_attn_desc(self) -> None:
        # Attention is built for exactly what the dispatcher decided.
        assert self.decode_desc is not None
        self.attn_desc = self.decode_desc

    def _cache_draft_dcp_lens(self, num_reqs: int) -> torch.Tensor | None:
        # Computed from whatever seq_lens hold *now*; kept for later steps.
        if self.dcp_size <= 1:
            return None
        self.target_dcp_local_seq_lens = prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )
        return self.target_dcp_local_seq_lens

    def _decode_slot_mappings(
        self, num_reqs: int, num_tokens_padded: int
    ) -> dict[str, torch.Tensor]:
        slot_mappings = self.block_tables.compute_slot_mappings(
            self.idx_mapping[:num_reqs],
            self.input_buffers.query_start_loc[: num_reqs + 1],
            self.input_buffers.positions[:num_reqs],
            num_tokens_padded=num_tokens_padded,
        )
        return build_slot_mappings_by_layer(slot_mappings, self.kv_cache_config)

    def _run_decode_step(
        self,
        num_reqs: int,
        desc: BatchExecutionDescriptor,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        step: int,
        num_speculative_steps: int,
    ) -> None:
        self.current_draft_step.fill_(step)
        if desc.cg_mode == CUDAGraphMode.FULL:
            assert self.decode_cudagraph_manager is not None
            self.decode_cudagraph_manager.run_fullgraph(desc)
        else:
            self._generate_draft(
                num_reqs,
                desc.num_tokens,
                attn_metadata,
                slot_mappings,
                self.decode_tokens_across_dp,
                desc.cg_mode,
                num_speculative_steps,
            )

    def _padding_qsl(self, num_reqs: int, total: int) -> np.ndarray:
        return qsl_with_padding_request(self.arange_np, num_reqs, 1, total)
