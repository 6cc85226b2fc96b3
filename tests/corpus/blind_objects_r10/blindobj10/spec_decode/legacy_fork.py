# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""MTP-style drafters on the pre-0.30 draft metadata interface.

These still pass the padded sizes to ``_build_draft_attn_metadata`` themselves.
"""
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.forward_context import BatchDescriptor, set_forward_context
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch

from blindobj10.spec_decode.fork_common import ForkSpeculatorCommon


class LegacyDraftSpeculator(ForkSpeculatorCommon):
    # expect: clean
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int | None = None,
        causal: bool | Mapping[int, bool] = True,
        query_start_loc_np: np.ndarray | None = None,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        if query_start_loc_np is None:
            assert num_query_per_req is not None
            query_start_loc_np = self.arange_np[: num_reqs + 1] * num_query_per_req
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens_padded,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=self.draft_max_seq_len,
            block_tables=block_tables,
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens_padded],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )

    def _run_model(
        self,
        num_tokens: int,
        attn_metadata: dict[str, Any] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE,
    ) -> torch.Tensor:
        slot_mappings = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, :num_tokens], self.kv_cache_config
        )
        with set_forward_context(
            attn_metadata,
            self.vllm_config,
            num_tokens=num_tokens,
            cudagraph_runtime_mode=cudagraph_runtime_mode,
            num_tokens_across_dp=num_tokens_across_dp,
            slot_mapping=slot_mappings,
            batch_descriptor=BatchDescriptor(num_tokens=num_tokens),
        ):
            return self.model(
                input_ids=self.input_buffers.input_ids[:num_tokens],
                positions=self.input_buffers.positions[:num_tokens],
            )


class ParallelDraftSpeculator(LegacyDraftSpeculator):
    """Drafts every speculative position in one forward."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.num_query_per_req = 1 + self.num_speculative_steps

    # expect: SG103
    def propose_block(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None = None,
        is_profile: bool = False,
    ) -> torch.Tensor:
        num_reqs = input_batch.num_reqs
        num_query_tokens = num_reqs * self.num_query_per_req
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(
            self.query_cudagraph_manager,
            num_reqs,
            num_query_tokens,
            uniform_token_count=self.num_query_per_req,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=dp_sync_state,
        )
        num_tokens_padded = batch_desc.num_tokens
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs_padded,
            num_tokens_padded=num_tokens_padded,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            num_query_per_req=self.num_query_per_req,
            causal=False,
        )
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._run_model(
                num_tokens_padded,
                attn_metadata,
                num_tokens_across_dp,
                batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]


class GuardedParallelDraftSpeculator(LegacyDraftSpeculator):
    """Drafts every speculative position in one forward."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.num_query_per_req = 1 + self.num_speculative_steps

    # expect: clean
    def propose_block(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None = None,
        is_profile: bool = False,
    ) -> torch.Tensor:
        num_reqs = input_batch.num_reqs
        num_query_tokens = num_reqs * self.num_query_per_req
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(
            self.query_cudagraph_manager,
            num_reqs,
            num_query_tokens,
            uniform_token_count=self.num_query_per_req,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=dp_sync_state,
        )
        num_tokens_padded = batch_desc.num_tokens
        num_tokens_across_dp = (
            batch_sync.num_tokens_across_dp if batch_sync is not None else None
        )
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            attn_num_reqs = batch_desc.num_reqs or num_reqs
            attn_num_tokens = num_tokens_padded
        else:
            attn_num_reqs = num_reqs
            attn_num_tokens = num_query_tokens
        attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=attn_num_reqs,
            num_tokens_padded=attn_num_tokens,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            num_query_per_req=self.num_query_per_req,
            causal=False,
        )
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            self._run_model(
                num_tokens_padded,
                attn_metadata,
                num_tokens_across_dp,
                batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]


class StepwiseDraftSpeculator(LegacyDraftSpeculator):
    """Autoregressive drafter: one token per request per step."""

    def _decode_steps(
        self, batch_desc: BatchExecutionDescriptor, num_reqs: int
    ) -> Iterator[tuple[int, int]]:
        for step in range(1, self.num_speculative_steps):
            torch.clamp(
                self.input_buffers.seq_lens[:num_reqs] + 1,
                max=self.max_model_len,
                out=self.input_buffers.seq_lens[:num_reqs],
            )
            yield step, batch_desc.num_tokens

    # expect: SG103
    def _multi_step_decode(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
    ) -> None:
        num_reqs = input_batch.num_reqs
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        for step, num_tokens in self._decode_steps(batch_desc, num_reqs):
            attn_metadata = self._build_draft_attn_metadata(
                num_reqs=num_reqs,
                num_reqs_padded=num_reqs_padded,
                num_tokens_padded=num_tokens,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
                num_query_per_req=1,
            )
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._run_model(
                    num_tokens,
                    attn_metadata,
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                )


class GuardedStepwiseDraftSpeculator(LegacyDraftSpeculator):
    """Autoregressive drafter: one token per request per step."""

    def _decode_steps(
        self, batch_desc: BatchExecutionDescriptor, num_reqs: int
    ) -> Iterator[tuple[int, int]]:
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs
        )
        for step in range(1, self.num_speculative_steps):
            torch.clamp(
                self.input_buffers.seq_lens[:num_reqs] + 1,
                max=self.max_model_len,
                out=self.input_buffers.seq_lens[:num_reqs],
            )
            yield step, num_tokens

    # expect: clean
    def _multi_step_decode(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_tokens_across_dp: torch.Tensor | None,
    ) -> None:
        num_reqs = input_batch.num_reqs
        for step, num_tokens in self._decode_steps(batch_desc, num_reqs):
            attn_metadata = self._build_draft_attn_metadata(
                num_reqs=num_reqs,
                num_reqs_padded=num_tokens,
                num_tokens_padded=num_tokens,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
                num_query_per_req=1,
            )
            if batch_desc.cg_mode == CUDAGraphMode.FULL:
                self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            else:
                self._run_model(
                    batch_desc.num_tokens,
                    attn_metadata,
                    num_tokens_across_dp,
                    batch_desc.cg_mode,
                )


class SyncedPrefillDraftSpeculator(LegacyDraftSpeculator):
    """Drafter whose first step reruns the target's (mixed) batch layout."""

    # expect: SG103
    def _prefill_step(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        num_tokens = input_batch.num_tokens
        batch_desc, batch_sync = dispatch_cg_and_sync_dp(
            self.cudagraph_manager,
            num_reqs,
            num_tokens,
            None,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            dp_sync_state=dp_sync_state,
        )
        md_kwargs = dict(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            query_start_loc_np=input_batch.query_start_loc_np,
        )
        if batch_sync is not None:
            md_kwargs["num_tokens_padded"] = int(batch_sync.num_tokens_across_dp.max())
        return self._build_draft_attn_metadata(**md_kwargs)


class CachedCountDraftSpeculator(LegacyDraftSpeculator):
    """Drafter that keeps the dispatched sizes for its builder table."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._metadata_builders = {
            "draft": self._build_draft_attn_metadata,
        }
        self._num_tokens_padded = 0
        self._num_reqs_padded = 0

    def _dispatch(
        self, num_reqs: int, dp_sync_state: DPSyncState | None
    ) -> BatchExecutionDescriptor:
        batch_desc, _ = dispatch_cg_and_sync_dp(
            self.cudagraph_manager,
            num_reqs,
            num_reqs,
            1,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            dp_sync_state=dp_sync_state,
        )
        self._num_tokens_padded = batch_desc.num_tokens
        self._num_reqs_padded = batch_desc.num_reqs or num_reqs
        return batch_desc

    # expect: SG103
    def _decode_once(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None,
        step: int,
    ) -> None:
        num_reqs = input_batch.num_reqs
        batch_desc = self._dispatch(num_reqs, dp_sync_state)
        build = self._metadata_builders["draft"]
        attn_metadata = build(
            num_reqs=num_reqs,
            num_reqs_padded=self._num_reqs_padded,
            num_tokens_padded=self._num_tokens_padded,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
            num_query_per_req=1,
        )
        self._run_model(
            self._num_tokens_padded, attn_metadata, None, batch_desc.cg_mode
        )

    # expect: clean
    def _decode_once_real(
        self,
        input_batch: InputBatch,
        dp_sync_state: DPSyncState | None,
        step: int,
    ) -> None:
        num_reqs = input_batch.num_reqs
        batch_desc = self._dispatch(num_reqs, dp_sync_state)
        build = self._metadata_builders["draft"]
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)
            return
        attn_metadata = build(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_reqs,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
            num_query_per_req=1,
        )
        self._run_model(
            self._num_tokens_padded, attn_metadata, None, batch_desc.cg_mode
        )
