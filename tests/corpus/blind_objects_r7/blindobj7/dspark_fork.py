# SPDX-License-Identifier: Apache-2.0
"""DSpark drafters of the fork, on top of the fork's split DFlash propose."""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.interface import ModelState
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.utils import AttentionGroup

from .dflash_fork import ForkDFlashSpeculator

logger = init_logger(__name__)


# idiom: vllm/v1/worker/gpu/cp_utils.py prepare_dcp_local_seq_lens called from a module-level function of a speculator module (not a capture builder)
# expect: SG104
def _refresh_draft_dcp_lens(
    speculator: "ForkDSparkSpeculator", num_reqs: int
) -> torch.Tensor | None:
    block_tables = speculator.block_tables
    if block_tables.cp_size == 1:
        return None
    return prepare_dcp_local_seq_lens(
        speculator.input_buffers.dcp_local_seq_lens,
        speculator.input_buffers.seq_lens,
        num_reqs,
        block_tables.cp_size,
        block_tables.cp_rank,
        block_tables.cp_interleave,
    )


class ForkDSparkSpeculator(ForkDFlashSpeculator, DSparkSpeculator):
    _speculator_name = "ForkDSpark"

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose (as run by DSparkSpeculator); step chosen by a conditional expression on sample_from_anchor
    # expect: clean
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        # Anchor-as-first layouts predict from every query position.
        step = (
            self.num_query_per_req
            if not self.sample_from_anchor
            else self.num_speculative_steps
        )
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=step,
            causal=self._group_causal,
        )


class AttrFnDSparkSpeculator(ForkDSparkSpeculator):
    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        # Swappable for the metadata recorder used by the replay tool.
        self._attn_metadata_fn = build_attn_metadata

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py (0.28 DFlashSpeculator.propose); sink stored as an instance attribute in __init__ and called here
    # expect: SG101
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        q = self.num_query_per_req
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs * q
        )
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        query_start_loc_cpu = torch.full(
            (num_reqs_padded + 1,), num_reqs * q, dtype=torch.int32
        )
        query_start_loc_cpu[: num_reqs + 1] = torch.arange(
            0, (num_reqs + 1) * q, q, dtype=torch.int32
        )
        return self._attn_metadata_fn(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=q,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=self._group_causal,
        )


class ScopedDSparkSpeculator(ForkDSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._update_draft_decode_metadata (DCP refresh) as a contextlib.contextmanager method
    # expect: SG104
    @contextmanager
    def _fresh_dcp_lens(self, num_reqs: int) -> Iterator[torch.Tensor | None]:
        if self.dcp_size == 1:
            yield None
            return
        yield prepare_dcp_local_seq_lens(
            self.input_buffers.dcp_local_seq_lens,
            self.input_buffers.seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
        )

    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        with self._fresh_dcp_lens(num_reqs) as dcp_local_seq_lens:
            return self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=self.num_query_per_req,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=self.num_query_per_req,
                causal=self._group_causal,
                dcp_local_seq_lens=dcp_local_seq_lens,
            )


class RefreshDSparkSpeculator(ForkDSparkSpeculator):
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=_refresh_draft_dcp_lens(self, num_reqs),
        )


class ObservedDSparkSpeculator(ForkDSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; pass-through override with *args/**kwargs and a debug log
    # expect: clean
    def _build_uniform_attn_metadata(self, *args: Any, **kwargs: Any):
        logger.debug("%s uniform draft metadata", self._speculator_name)
        return super()._build_uniform_attn_metadata(*args, **kwargs)


class AnchorLensDSparkSpeculator(ForkDSparkSpeculator):
    def _on_target_batch(self, input_batch: InputBatch) -> None:
        # Keep the anchor's view of the verified context for the query block.
        self._anchor_dcp_lens = input_batch.dcp_local_seq_lens

    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose; lengths stashed on self by a hook earlier in propose, handed to the uniform helper
    # expect: SG105
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=self._anchor_dcp_lens,
        )


class BuilderDSparkSpeculator(ForkDSparkSpeculator):
    # idiom: vllm/v1/worker/utils.py AttentionGroup.build_metadata inlined; group.get_metadata_builder().build(...) per group in the speculator
    # expect: SG101
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        q = self.num_query_per_req
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_reqs_padded = (batch_desc.num_reqs or num_reqs) if is_full else num_reqs
        num_tokens = batch_desc.num_tokens if is_full else num_reqs * q
        query_start_loc_cpu = torch.from_numpy(
            self.arange_np[: num_reqs_padded + 1] * q
        ).clamp_(max=num_reqs * q)
        attn_metadata: dict[str, Any] = {}
        for gid, groups in enumerate(self.attn_groups):
            causal = (
                self._group_causal
                if isinstance(self._group_causal, bool)
                else self._group_causal.get(gid, True)
            )
            common = CommonAttentionMetadata(
                query_start_loc=self.input_buffers.query_start_loc[
                    : num_reqs_padded + 1
                ],
                query_start_loc_cpu=query_start_loc_cpu,
                seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
                num_reqs=num_reqs_padded,
                num_actual_tokens=num_tokens,
                max_query_len=q,
                max_seq_len=self.draft_max_seq_len,
                block_table_tensor=self.block_tables.input_block_tables[gid][
                    :num_reqs_padded
                ],
                slot_mapping=self.block_tables.slot_mappings[gid, :num_tokens],
                causal=causal,
            )
            for group in groups:
                metadata = group.get_metadata_builder().build(
                    common_prefix_len=0, common_attn_metadata=common
                )
                attn_metadata.update(dict.fromkeys(group.layer_names, metadata))
        return attn_metadata


class ExplicitNoneDSparkSpeculator(ForkDSparkSpeculator):
    # idiom: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose; explicit dcp_local_seq_lens=None so the shared helper recomputes
    # expect: clean
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            self.num_query_per_req,
            input_batch.seq_lens_cpu_upper_bound,
            self.num_query_per_req,
            causal=self._group_causal,
            dcp_local_seq_lens=None,
        )


class PartialHelperDSparkSpeculator(ForkDSparkSpeculator):
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
        self._query_metadata = partial(
            self._build_uniform_attn_metadata,
            num_query_per_req=self.num_query_per_req,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata bound into a functools.partial in set_attn, called here
    # expect: clean
    def _query_attn_metadata(
        self,
        input_batch: InputBatch,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
    ) -> dict[str, Any] | None:
        return self._query_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
        )
