# SPDX-License-Identifier: Apache-2.0
"""Standalone autoregressive drafters (separate small LM) in the fork.

Upstream ``StandaloneARSpeculator`` runs eagerly. The fork adds FA-aligned
prefill batches, DCP support and a FULL-graph capture for the decode steps.
"""

from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.utils.math_utils import round_up
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import (
    build_attn_metadata,
    build_slot_mappings_by_layer,
)
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import (
    AttentionState,
    BatchExecutionDescriptor,
)
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)
from vllm.v1.worker.utils import AttentionGroup

from ._attn_plumbing import build_uniform_decode_metadata
from ._dcp_support import recompute_draft_local_lens
from ._padding import expanded_query_start_loc, pad_expanded_query_start_loc

logger = init_logger(__name__)


def _eager_decode_desc(num_reqs: int) -> BatchExecutionDescriptor:
    return BatchExecutionDescriptor(
        cg_mode=CUDAGraphMode.NONE,
        num_tokens=num_reqs,
        num_reqs=num_reqs,
        uniform_token_count=1,
    )


# ---------------------------------------------------------------------------
# Module-level builders.
# ---------------------------------------------------------------------------
# idiom: dflash/cudagraph.py _prepare_dflash_inputs_to_capture: InputBatch.make_dummy, prepare_dcp_local_seq_lens for the dummy batch, build_attn_metadata(for_cudagraph_capture=True)
# expect: clean
def _prepare_standalone_decode_to_capture(
    num_reqs: int,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
) -> AttentionState:
    input_batch = InputBatch.make_dummy(num_reqs, num_reqs, input_buffers)
    input_block_tables = block_tables.get_dummy_block_tables(num_reqs)
    slot_mappings = block_tables.get_dummy_slot_mappings(num_reqs)
    slot_mappings_by_layer = build_slot_mappings_by_layer(
        slot_mappings, kv_cache_config
    )
    if block_tables.cp_size > 1:
        input_batch.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_batch.seq_lens,
            input_batch.num_reqs,
            block_tables.cp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
            num_reqs_padded=input_batch.num_reqs_after_padding,
        )
    attn_metadata = build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_reqs,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=1,
        seq_lens=input_batch.seq_lens,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        max_seq_len=max_model_len,
        block_tables=input_block_tables,
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
    )
    return AttentionState(attn_metadata, slot_mappings_by_layer)


# idiom: cudagraph_utils.prepare_inputs_to_capture's for_capture=full_cudagraph, ported to the drafter module: the PIECEWISE capture path builds with for_cudagraph_capture=False
# expect: SG101
def _prepare_standalone_step_to_capture(
    desc: BatchExecutionDescriptor,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
) -> AttentionState:
    num_tokens = desc.num_tokens
    num_reqs = desc.num_reqs or num_tokens
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
    slot_mappings = block_tables.get_dummy_slot_mappings(num_tokens)
    attn_metadata = build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=num_tokens // num_reqs,
        seq_lens=input_batch.seq_lens,
        max_seq_len=max_model_len,
        block_tables=block_tables.get_dummy_block_tables(num_reqs),
        slot_mappings=slot_mappings,
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=desc.cg_mode == CUDAGraphMode.FULL,
    )
    return AttentionState(
        attn_metadata, build_slot_mappings_by_layer(slot_mappings, kv_cache_config)
    )


# idiom: StandaloneARSpeculator._prefill's expanded (+1 correction slot) prefill metadata, hoisted to a module-level function of the drafter module that calls build_attn_metadata directly
# expect: SG101
def _build_expanded_prefill_metadata(
    spec: "StandaloneARSpeculator",
    input_batch: InputBatch,
    num_reqs: int,
    total_expanded: int,
    slot_mappings: torch.Tensor,
) -> dict[str, Any]:
    query_start_loc_np, _ = expanded_query_start_loc(
        input_batch.query_start_loc_np, spec.arange_np, num_reqs
    )
    query_lens = np.diff(query_start_loc_np)
    return build_attn_metadata(
        attn_groups=spec.attn_groups,
        num_reqs=num_reqs,
        num_tokens=total_expanded,
        query_start_loc_gpu=spec.input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=torch.from_numpy(query_start_loc_np),
        max_query_len=int(query_lens.max()),
        seq_lens=spec.input_buffers.seq_lens[:num_reqs],
        max_seq_len=spec.max_model_len,
        block_tables=[x[:num_reqs] for x in spec.block_tables.input_block_tables],
        slot_mappings=slot_mappings,
        kv_cache_config=spec.kv_cache_config,
        seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound[:num_reqs] + 1,
    )


# idiom: speculator.py's DCP recompute copied into a module-level function of the drafter module (not a capture-time builder), taking the speculator as an argument
# expect: SG104
def _dcp_refresh_for_draft(spec: "StandaloneARSpeculator", num_reqs: int) -> None:
    if spec.dcp_size == 1:
        return
    prepare_dcp_local_seq_lens(
        spec.input_buffers.dcp_local_seq_lens,
        spec.input_buffers.seq_lens,
        num_reqs,
        spec.dcp_size,
        spec.block_tables.cp_rank,
        spec.block_tables.cp_interleave,
    )


# ---------------------------------------------------------------------------
# Drafters.
# ---------------------------------------------------------------------------
class AlignedStandaloneSpeculator(StandaloneARSpeculator):
    """Pads the expanded prefill to a multiple of the FA3 split size."""

    _fa_alignment: int = 16

    # idiom: StandaloneARSpeculator._prefill's expanded query_start_loc (qsl + arange) rounded up with math_utils.round_up by a helper in another module, returned as a tuple and fed to _build_attn_metadata under an eager descriptor
    # expect: SG103
    def _prefill_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        query_start_loc_np, padded_total = pad_expanded_query_start_loc(
            input_batch.query_start_loc_np,
            self.arange_np,
            num_reqs,
            alignment=self._fa_alignment,
        )
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE,
                num_tokens=padded_total,
                num_reqs=num_reqs,
            ),
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=slot_mappings,
        )


class UnpaddedStandaloneSpeculator(StandaloneARSpeculator):
    """Allocates the aligned slot-mapping width but builds the real batch."""

    _fa_alignment: int = 16

    # idiom: StandaloneARSpeculator._prefill (eager descriptor, expanded query_start_loc); the round_up'd total only sizes the slot-mapping view, the helper gets the unpadded offsets
    # expect: clean
    def _prefill_metadata(
        self,
        input_batch: InputBatch,
        num_reqs: int,
        slot_mappings: torch.Tensor,
    ) -> dict[str, Any] | None:
        query_start_loc_np, total = expanded_query_start_loc(
            input_batch.query_start_loc_np, self.arange_np, num_reqs
        )
        aligned = round_up(total, self._fa_alignment)
        slot_view = self.expanded_slot_mappings[:, :aligned]
        slot_view[:, total:].fill_(-1)
        return self._build_attn_metadata(
            batch_desc=BatchExecutionDescriptor(
                cg_mode=CUDAGraphMode.NONE, num_tokens=total, num_reqs=num_reqs
            ),
            num_reqs=num_reqs,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            slot_mappings=slot_mappings,
        )


class PlumbedStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: StandaloneARSpeculator._multi_step_decode's per-step decode metadata delegated to a helper in another module (_attn_plumbing.build_uniform_decode_metadata, which calls build_attn_metadata)
    # expect: SG101
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any]:
        return build_uniform_decode_metadata(
            self.attn_groups,
            self.kv_cache_config,
            self.input_buffers,
            self.block_tables,
            num_reqs,
            max_seq_len=self.max_model_len,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound + step + 1,
        )


class HelperDcpStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: StandaloneARSpeculator._multi_step_decode's uniform decode build, with rank-local lengths from a helper in another module (_dcp_support.recompute_draft_local_lens) handed to the helper
    # expect: SG104
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        local_lens = (
            recompute_draft_local_lens(
                self.input_buffers, self.block_tables, num_reqs, self.dcp_size
            )
            if self.dcp_size > 1
            else None
        )
        return self._build_uniform_attn_metadata(
            batch_desc=_eager_decode_desc(num_reqs),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
            dcp_local_seq_lens=local_lens,
        )


class StaticDcpStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: speculator.py's DCP recompute as a @staticmethod of the drafter class, called per decode step
    # expect: SG104
    @staticmethod
    def _local_lens(
        input_buffers: InputBuffers,
        block_tables: BlockTables,
        num_reqs: int,
    ) -> torch.Tensor | None:
        if block_tables.cp_size == 1:
            return None
        return prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_buffers.seq_lens,
            num_reqs,
            block_tables.cp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
        )

    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc=_eager_decode_desc(num_reqs),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
            dcp_local_seq_lens=self._local_lens(
                self.input_buffers, self.block_tables, num_reqs
            ),
        )


class ModuleDcpStandaloneSpeculator(StandaloneARSpeculator):
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        _dcp_refresh_for_draft(self, num_reqs)
        return self._build_uniform_attn_metadata(
            batch_desc=_eager_decode_desc(num_reqs),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
        )


class TargetKwargsStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: StandaloneARSpeculator decode build with DCP kwargs gathered by a dict comprehension over the target runner's InputBuffers (getattr) and splatted into the uniform helper
    # expect: SG105
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        dcp_kwargs = {
            name: getattr(self.target_input_buffers, name)
            for name in ("dcp_local_seq_lens",)
            if self.dcp_size > 1
        }
        return self._build_uniform_attn_metadata(
            batch_desc=_eager_decode_desc(num_reqs),
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step + 1,
            **dcp_kwargs,
        )


class ZeroTailStandaloneSpeculator(StandaloneARSpeculator):
    # idiom: StandaloneARSpeculator decode build through the uniform helper (helper recomputes DCP lengths); the drafter only zeroes input_buffers.dcp_local_seq_lens' padded tail afterwards in try/finally
    # expect: clean
    def _decode_step_metadata(
        self, input_batch: InputBatch, num_reqs: int, step: int
    ) -> dict[str, Any] | None:
        try:
            return self._build_uniform_attn_metadata(
                batch_desc=_eager_decode_desc(num_reqs),
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step + 1,
            )
        finally:
            if self.dcp_size > 1:
                self.input_buffers.dcp_local_seq_lens[num_reqs:].zero_()
