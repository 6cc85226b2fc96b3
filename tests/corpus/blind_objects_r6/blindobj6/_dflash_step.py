# SPDX-License-Identifier: Apache-2.0
"""The fork's split of ``DFlashSpeculator.propose``'s query step.

Upstream builds and runs the DFlash query step inline at the end of
``propose``. The fork splits it so drafters can customise only the metadata
build (``_query_metadata``) while sharing dispatch and execution.
"""

from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.input_batch import InputBatch


class QueryStepMixin:
    """Mixed in front of a DFlash-family speculator."""

    def _dispatch_query(
        self,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        is_profile: bool,
    ) -> tuple[BatchExecutionDescriptor, DPSyncState | None]:
        batch_sync, num_batch_tokens = (
            self._build_uniform_batch_dp_sync(
                dp_sync_state, num_reqs, self.num_query_per_req
            )
            if dp_sync_state is not None
            else (None, num_reqs * self.num_query_per_req)
        )
        return dispatch_cg_and_sync_dp(
            self.query_cudagraph_manager,
            num_reqs,
            num_batch_tokens,
            uniform_token_count=self.num_query_per_req,
            dp_size=self.dp_size,
            dp_rank=self.dp_rank,
            need_eager=is_profile,
            dp_sync_state=batch_sync,
        )

    def _query_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    def _query_step(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        dp_sync_state: DPSyncState | None = None,
        is_profile: bool = False,
    ) -> torch.Tensor:
        batch_desc, batch_sync = self._dispatch_query(
            num_reqs, dp_sync_state, is_profile
        )
        attn_metadata = self._query_metadata(input_batch, batch_desc, num_reqs)
        self._prepare_eplb_forward(num_reqs * self.num_query_per_req)
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            assert self.query_cudagraph_manager is not None
            self.query_cudagraph_manager.run_fullgraph(batch_desc)
        else:
            slot_mappings = build_slot_mappings_by_layer(
                self.block_tables.slot_mappings[:, : batch_desc.num_tokens],
                self.kv_cache_config,
            )
            self._generate_draft(
                num_reqs,
                batch_desc.num_tokens,
                attn_metadata,
                slot_mappings,
                num_tokens_across_dp=(
                    batch_sync.num_tokens_across_dp if batch_sync else None
                ),
                cudagraph_runtime_mode=batch_desc.cg_mode,
            )
        return self.draft_tokens[:num_reqs]
