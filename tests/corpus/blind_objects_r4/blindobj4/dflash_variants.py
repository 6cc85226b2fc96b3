# SPDX-License-Identifier: Apache-2.0
"""DFlash / DSpark query-pass metadata variants."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.utils.math_utils import round_up
from vllm.v1.worker.gpu.attn_utils import build_slot_mappings_by_layer
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator

from blindobj4._dcp import refresh_draft_local_lens
from blindobj4._padding import DraftGraphState, pad_to_bucket
from blindobj4.base import DCPAwareDFlashBase

logger = init_logger(__name__)


class AlignedDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG103
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        num_query_tokens = num_reqs * self.num_query_per_req
        num_aligned = round_up(num_query_tokens, 16)
        query_start_loc_np = self.arange_np[: num_reqs + 1] * self.num_query_per_req
        query_start_loc_np[num_reqs] = num_aligned
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: clean
    def _draft_query_metadata_exact(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> tuple[dict[str, Any] | None, dict[str, torch.Tensor]]:
        num_query_tokens = num_reqs * self.num_query_per_req
        num_aligned = round_up(num_query_tokens, 16)
        query_start_loc_np = self.arange_np[: num_reqs + 1] * self.num_query_per_req
        attn_metadata = self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        slot_mappings_by_layer = build_slot_mappings_by_layer(
            self.block_tables.slot_mappings[:, :num_aligned], self.kv_cache_config
        )
        return attn_metadata, slot_mappings_by_layer


class CaptureBucketDFlashSpeculator(DFlashSpeculator):
    # idiom: sglang/srt/model_executor/runner/base_cuda_graph_runner.py _pad_to_bucket
    # expect: SG103
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        capture_sizes = self.vllm_config.compilation_config.cudagraph_capture_sizes
        bucket = pad_to_bucket(num_reqs * self.num_query_per_req, capture_sizes or [])
        num_reqs_md = min(bucket // self.num_query_per_req, self.max_num_reqs)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs_md,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: sglang/srt/model_executor/runner/base_cuda_graph_runner.py _pad_to_bucket
    # expect: clean
    def _draft_query_metadata_clamped(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        capture_sizes = self.vllm_config.compilation_config.cudagraph_capture_sizes
        bucket = pad_to_bucket(num_reqs * self.num_query_per_req, capture_sizes or [])
        if bucket > self.max_num_tokens:
            logger.debug("draft query batch %d exceeds the largest bucket", bucket)
        num_reqs_md = min(num_reqs, self.max_num_reqs)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs_md,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class DPMaxDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (dp sync)
    # expect: SG103
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
    ) -> dict[str, Any] | None:
        if batch_sync is not None:
            max_tokens = int(batch_sync.num_tokens_across_dp.max())
            num_reqs_md = max_tokens // self.num_query_per_req
        else:
            num_reqs_md = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs_md,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (dp sync)
    # expect: clean
    def _draft_query_metadata_full_only(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        batch_sync: DPSyncState | None,
    ) -> dict[str, Any] | None:
        num_reqs_md = num_reqs
        if batch_desc.cg_mode == CUDAGraphMode.FULL and batch_sync is not None:
            max_tokens = int(batch_sync.num_tokens_across_dp.max())
            num_reqs_md = max_tokens // self.num_query_per_req
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs_md,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class GraphStateDFlashSpeculator(DFlashSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._graph_state = DraftGraphState()

    def _record_dispatch(self, batch_desc: BatchExecutionDescriptor, num_reqs: int) -> None:
        self._graph_state.record(batch_desc, num_reqs)

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG103
    def _draft_query_metadata(self, input_batch: InputBatch) -> dict[str, Any] | None:
        state = self._graph_state
        assert state.desc is not None
        return self._build_uniform_attn_metadata(
            batch_desc=state.desc,
            num_reqs=state.num_reqs_padded,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: clean
    def _draft_query_metadata_actual(
        self, input_batch: InputBatch
    ) -> dict[str, Any] | None:
        state = self._graph_state
        assert state.desc is not None
        return self._build_uniform_attn_metadata(
            batch_desc=state.desc,
            num_reqs=state.num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class TwoPhaseDSparkSpeculator(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dspark/speculator.py DSparkSpeculator (context + query passes)
    # expect: SG103
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        context_desc: BatchExecutionDescriptor,
        query_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        # Keep both passes on one graph mode so the captured refresh lines up.
        md_desc = replace(query_desc, cg_mode=context_desc.cg_mode)
        return self._build_uniform_attn_metadata(
            batch_desc=md_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dspark/speculator.py DSparkSpeculator (context + query passes)
    # expect: clean
    def _draft_query_metadata_checked(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        context_desc: BatchExecutionDescriptor,
        query_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        if context_desc.cg_mode != query_desc.cg_mode:
            logger.debug(
                "DSpark context pass runs %s, query pass runs %s",
                context_desc.cg_mode.name,
                query_desc.cg_mode.name,
            )
        return self._build_uniform_attn_metadata(
            batch_desc=query_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class DCPDFlashSpeculator(DCPAwareDFlashBase):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG104
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        dcp_local_seq_lens = None
        if self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
                num_reqs_padded=num_reqs,
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )

    def _draft_query_metadata_base_lens(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=self._prepare_local_lens(num_reqs),
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: clean
    def _draft_query_metadata_default(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        self._log_local_lens(num_reqs)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class HelperDCPDSparkSpeculator(DSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG104
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        dcp_lens = refresh_draft_local_lens(
            self.input_buffers, self.block_tables, num_reqs, self.dcp_size
        )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=dcp_lens,
        )


class WarmDCPDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator._prepare_graph_forward
    # expect: SG104
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        if self.dcp_size > 1:
            # Keep the persistent buffer current for the graph's refresh kernel.
            refresh_draft_local_lens(
                self.input_buffers, self.block_tables, num_reqs, self.dcp_size
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class TargetDCPDFlashSpeculator(DFlashSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG105
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: clean
    def _draft_query_metadata_own_lens(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        if input_batch.dcp_local_seq_lens is not None:
            assert input_batch.dcp_local_seq_lens.shape[0] >= num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=None,
        )


class StickyDCPDSparkSpeculator(DSparkSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._prev_dcp_lens: torch.Tensor | None = None

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG105
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        prev = self._prev_dcp_lens
        if prev is not None and prev.shape[0] != num_reqs:
            prev = None
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=prev,
        )
        if self.dcp_size > 1:
            self._prev_dcp_lens = self.input_buffers.dcp_local_seq_lens[:num_reqs]
        return attn_metadata


class BatchKeyedDCPDFlashSpeculator(DFlashSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self._dcp_by_batch: dict[tuple[str, ...], torch.Tensor] = {}

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: SG105
    def _draft_query_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        key = tuple(input_batch.req_ids[:num_reqs])
        cached = self._dcp_by_batch.get(key)
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=cached,
        )
        if cached is None and self.dcp_size > 1:
            self._dcp_by_batch[key] = self.input_buffers.dcp_local_seq_lens[
                :num_reqs
            ].clone()
        return attn_metadata

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (query metadata)
    # expect: clean
    def _draft_query_metadata_uncached(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        self._dcp_by_batch.pop(tuple(input_batch.req_ids[:num_reqs]), None)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
