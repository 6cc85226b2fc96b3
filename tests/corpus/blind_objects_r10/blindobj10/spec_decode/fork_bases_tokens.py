# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Platform draft speculators that carry their own metadata helpers."""
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

from blindobj10.spec_decode.fork_common import ForkSpeculatorCommon


class EagerDraftSpeculator(ForkSpeculatorCommon):
    """Speculator for platforms that only run drafts eagerly or piecewise."""

    # expect: SG103
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = batch_desc.num_tokens
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
            positions=self.input_buffers.positions[:num_tokens],
        )


class GraphAwareDraftSpeculator(ForkSpeculatorCommon):
    """Speculator whose draft replays captured graphs when one matches."""

    # expect: SG103
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        # Graph replays see the captured shape; eager sees the real batch.
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode != CUDAGraphMode.NONE
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class TargetGuidedDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that follows the target step's graph decision."""

    def note_target_batch(self, batch_desc: BatchExecutionDescriptor) -> None:
        self._target_batch_desc = batch_desc

    # expect: SG103
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        if self._target_batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[-1])
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class CappedDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that bounds the draft batch by the scheduler budget."""

    # expect: SG103
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = min(batch_desc.num_tokens, self.max_num_tokens)
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class StatefulDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that records the dispatched batch once per propose."""

    def _begin_step(self, batch_desc: BatchExecutionDescriptor) -> None:
        self._batch_desc = batch_desc

    @property
    def _attn_num_tokens(self) -> int:
        return self._batch_desc.num_tokens

    # expect: SG103
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        self._begin_step(batch_desc)
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = self._attn_num_tokens
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class BucketedDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that pads draft batches to the captured bucket sizes."""

    # expect: SG103
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = self._padded_capture_size(int(query_start_loc_np[num_reqs]))
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class ModeSplitDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that separates FULL replays from eager/piecewise drafts."""

    # expect: clean
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        if is_full:
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[-1])
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class MatchDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that dispatches its token count on the graph mode."""

    # expect: clean
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        match batch_desc.cg_mode:
            case CUDAGraphMode.FULL:
                num_tokens = batch_desc.num_tokens
            case _:
                num_tokens = int(query_start_loc_np[num_reqs])
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )


class NormalizingDraftSpeculator(ForkSpeculatorCommon):
    """Speculator that rewrites non-FULL descriptors to the real batch size."""

    # expect: clean
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = True,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            batch_desc = replace(
                batch_desc, num_tokens=int(query_start_loc_np[num_reqs])
            )
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = batch_desc.num_tokens
        query_start_loc_cpu, max_query_len, block_tables = self._query_inputs(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        upper_bound = self._seq_lens_upper_bound(
            num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
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
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=upper_bound,
        )
