# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Drafters used with decode context parallelism (MLA targets)."""
from functools import partial
from typing import Any

import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
from vllm.v1.worker.utils import AttentionGroup

from blindobj10.spec_decode.draft_utils import (
    DCPLocalLens,
    advance_seq_lens,
    iter_draft_steps,
    refresh_dcp_local_seq_lens,
)


# expect: clean
def prepare_dcp_draft_to_capture(
    num_reqs: int,
    num_tokens: int,
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    attn_groups: list[list[AttentionGroup]],
    kv_cache_config: KVCacheConfig,
    max_model_len: int,
) -> dict[str, Any]:
    input_batch = InputBatch.make_dummy(num_reqs, num_tokens, input_buffers)
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
    return build_attn_metadata(
        attn_groups=attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=input_batch.query_start_loc,
        query_start_loc_cpu=torch.from_numpy(input_batch.query_start_loc_np),
        max_query_len=num_tokens // num_reqs,
        seq_lens=input_batch.seq_lens,
        dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        max_seq_len=max_model_len,
        block_tables=block_tables.get_dummy_block_tables(num_reqs),
        slot_mappings=block_tables.get_dummy_slot_mappings(num_tokens),
        kv_cache_config=kv_cache_config,
        for_cudagraph_capture=True,
    )


# expect: SG104
def rewind_draft_seq_lens(
    input_buffers: InputBuffers,
    block_tables: BlockTables,
    target_seq_lens: torch.Tensor,
    num_rejected: torch.Tensor,
    num_reqs: int,
) -> None:
    input_buffers.seq_lens[:num_reqs] = (
        target_seq_lens[:num_reqs] - num_rejected[:num_reqs].int() + 1
    )
    if block_tables.cp_size > 1:
        prepare_dcp_local_seq_lens(
            input_buffers.dcp_local_seq_lens,
            input_buffers.seq_lens,
            num_reqs,
            block_tables.cp_size,
            block_tables.cp_rank,
            block_tables.cp_interleave,
        )


class DraftInputStager:
    """Stages the target runner's inputs before the draft is dispatched."""

    def __init__(self, input_buffers: InputBuffers, block_tables: BlockTables):
        self.input_buffers = input_buffers
        self.block_tables = block_tables

    # expect: clean
    def stage(self, input_batch: InputBatch) -> None:
        num_reqs = input_batch.num_reqs
        self.input_buffers.seq_lens[:num_reqs].copy_(input_batch.seq_lens[:num_reqs])
        if self.block_tables.cp_size > 1:
            input_batch.dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
                num_reqs_padded=input_batch.num_reqs_after_padding,
            )


class DCPMTPSpeculator(DraftModelSpeculator):
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
        self._refresh_local_lens = partial(
            prepare_dcp_local_seq_lens,
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            dcp_size=block_tables.cp_size,
            dcp_rank=block_tables.cp_rank,
            cp_interleave=block_tables.cp_interleave,
        )
        self._local_lens = DCPLocalLens(self.input_buffers, block_tables)

    def _advance(self, num_reqs: int) -> None:
        torch.clamp(
            self.input_buffers.seq_lens[:num_reqs] + 1,
            max=self.max_model_len,
            out=self.input_buffers.seq_lens[:num_reqs],
        )
        torch.clamp(
            self.input_buffers.positions[:num_reqs] + 1,
            max=self.max_model_len - 1,
            out=self.input_buffers.positions[:num_reqs],
        )

    # expect: SG104
    def _first_decode_step(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        self._advance(num_reqs)
        if self.dcp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
        )

    # expect: SG104
    def _verify_block_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
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
            )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )

    # expect: SG104
    def _multi_step_decode(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> None:
        for step in range(1, self.num_speculative_steps):
            self._advance(num_reqs)
            if self.dcp_size > 1:
                self._refresh_local_lens(num_reqs=num_reqs)
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
            )
            self._generate_draft(num_reqs, batch_desc, attn_metadata)

    # expect: SG104
    def _lookahead_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        self._local_lens.num_reqs = num_reqs
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
            dcp_local_seq_lens=(
                self._local_lens.current if self.dcp_size > 1 else None
            ),
        )

    # expect: SG104
    def _stepped_decode(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> None:
        for step in iter_draft_steps(
            self.input_buffers,
            self.block_tables,
            num_reqs,
            self.num_speculative_steps,
            self.max_model_len,
        ):
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
            )
            self._generate_draft(num_reqs, batch_desc, attn_metadata)

    # expect: clean
    def _plain_stepped_decode(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> None:
        for step in advance_seq_lens(
            self.input_buffers,
            num_reqs,
            self.num_speculative_steps,
            self.max_model_len,
        ):
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
            )
            self._generate_draft(num_reqs, batch_desc, attn_metadata)

    # expect: SG104
    def _rewind_and_build(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_rejected: torch.Tensor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        self.input_buffers.seq_lens[:num_reqs] = (
            input_batch.seq_lens[:num_reqs] - num_rejected[:num_reqs].int() + 1
        )
        refresh_dcp_local_seq_lens(self.input_buffers, self.block_tables, num_reqs)
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
        )

    # expect: clean
    def _rewind_only(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_rejected: torch.Tensor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        self.input_buffers.seq_lens[:num_reqs] = (
            input_batch.seq_lens[:num_reqs] - num_rejected[:num_reqs].int() + 1
        )
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
        )

    # expect: SG105
    def _decode_with_runner_lens(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> None:
        for step in range(1, self.num_speculative_steps):
            self._advance(num_reqs)
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=self.input_buffers.dcp_local_seq_lens,
            )
            self._generate_draft(num_reqs, batch_desc, attn_metadata)

    # expect: clean
    def _decode_with_helper_lens(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> None:
        for step in range(1, self.num_speculative_steps):
            self._advance(num_reqs)
            attn_metadata = self._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=1,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=step,
                dcp_local_seq_lens=None,
            )
            self._generate_draft(num_reqs, batch_desc, attn_metadata)

    def _generate_draft(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        attn_metadata: dict[str, Any] | None,
    ) -> None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)


class CachingDCPSpeculator(DraftModelSpeculator):
    """Drafter that reuses the first step's metadata inputs across steps."""

    def _advance(self, num_reqs: int) -> None:
        torch.clamp(
            self.input_buffers.seq_lens[:num_reqs] + 1,
            max=self.max_model_len,
            out=self.input_buffers.seq_lens[:num_reqs],
        )

    def _first_step(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        attn_metadata = self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=1,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=1,
        )
        self._step_dcp_local_seq_lens = (
            self.input_buffers.dcp_local_seq_lens if self.dcp_size > 1 else None
        )
        return attn_metadata

    # expect: SG105
    def _later_steps(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> list[dict[str, Any] | None]:
        out = [self._first_step(input_batch, batch_desc, num_reqs)]
        for step in range(2, self.num_speculative_steps):
            self._advance(num_reqs)
            out.append(
                self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=1,
                    seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                    step=step,
                    dcp_local_seq_lens=self._step_dcp_local_seq_lens,
                )
            )
        return out

    # expect: SG105
    def _prefill_with_target_lens(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )

    # expect: clean
    def _prefill_with_own_lens(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
    ) -> dict[str, Any] | None:
        num_reqs = input_batch.num_reqs
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=input_batch.query_start_loc_np,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=0,
        )
