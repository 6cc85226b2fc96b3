# SPDX-License-Identifier: Apache-2.0
"""Stepwise speculator bases used by the fork's internal AR drafters."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.utils import AttentionGroup

from ._metadata_utils import draft_seq_lens_upper_bound
from .fork_base import ForkSpeculatorCore


class MatchGraphSpeculatorBase(ForkSpeculatorCore):
    """Base of drafters that run under both FULL and PIECEWISE graphs."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; match statement over the descriptor's cg_mode with an or-pattern
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
        match batch_desc.cg_mode:
            case CUDAGraphMode.FULL | CUDAGraphMode.PIECEWISE:
                # Graph replays see the captured width.
                num_tokens = batch_desc.num_tokens
            case _:
                num_tokens = int(query_start_loc_np[-1])
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
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
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
            positions=self.input_buffers.positions[:num_tokens],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; keyword delegation to the family helper
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
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=self.arange_np[: num_reqs + 1] * num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class RelayDraftSpeculatorBase(ForkSpeculatorCore):
    """Base of relay drafters, which attend over the target's KV layout."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; sink kwargs assembled in a dict and splatted
    # expect: SG105
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
        """Relay drafters share the target's block tables, so the metadata
        builders derive what they need from seq_lens and the block table."""
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        common: dict[str, Any] = dict(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
        )
        if slot_mappings is not None:
            common["slot_mappings"] = slot_mappings
        common["seq_lens_cpu_upper_bound"] = draft_seq_lens_upper_bound(
            seq_lens_cpu_upper_bound,
            num_reqs,
            num_reqs_padded,
            step,
            self.max_model_len,
        )
        return build_attn_metadata(**common)

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
        return self._build_attn_metadata(
            num_reqs,
            batch_desc,
            self.arange_np[: num_reqs + 1] * num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class WalrusDraftSpeculatorBase(ForkSpeculatorCore):
    """Base of the fork's MTP-head drafters."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; walrus on the DCP preparation's result, conditional expression on FULL
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
        is_full_graph = batch_desc.cg_mode == CUDAGraphMode.FULL
        # Only a FULL graph replays the padded shape; eager and PIECEWISE
        # attention must agree with query_start_loc.
        num_tokens = (
            batch_desc.num_tokens if is_full_graph else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if (
            dcp_local_seq_lens is None
            and self.dcp_size > 1
            and (
                fresh := prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                    num_reqs_padded=num_reqs_padded,
                )
            )
            is not None
        ):
            dcp_local_seq_lens = fresh
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
            dcp_local_seq_lens=dcp_local_seq_lens,
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
            positions=self.input_buffers.positions[:num_tokens],
            is_prefilling=self.draft_is_prefilling[:num_reqs_padded],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; numpy arange layout, positional delegation
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
        query_start_loc_np = (
            np.arange(num_reqs + 1, dtype=np.int32) * num_query_per_req
        )
        return self._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
        )


class MirrorBufferSpeculatorBase(ForkSpeculatorCore):
    """Base of drafters whose builders were registered with the target's
    DCP length buffer."""

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
        self._dcp_lens_mirror = target_input_buffers.dcp_local_seq_lens

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata (DCP fix); preparation writes one buffer, the build reads another stored on self
    # expect: SG105
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
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            # The builders were registered with the mirror buffer.
            dcp_local_seq_lens = self._dcp_lens_mirror
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
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
        )


class FlagCorrelatedSpeculatorBase(ForkSpeculatorCore):
    """Base of drafters that pad requests for graph replay."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; flag derived from num_reqs early, token count chosen by the same flag later
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
        # Request-padded descriptors come from FULL graphs; PIECEWISE graphs
        # leave num_reqs unset.
        request_padded = batch_desc.num_reqs is not None
        num_reqs_padded = batch_desc.num_reqs if request_padded else num_reqs
        assert num_reqs_padded is not None
        query_start_loc_cpu, max_query_len = self._draft_query_start_loc(
            num_reqs, num_reqs_padded, query_start_loc_np
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
        num_tokens = (
            batch_desc.num_tokens if request_padded else int(query_start_loc_np[-1])
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
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
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=draft_seq_lens_upper_bound(
                seq_lens_cpu_upper_bound,
                num_reqs,
                num_reqs_padded,
                step,
                self.max_model_len,
            ),
        )
