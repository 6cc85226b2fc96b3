# SPDX-License-Identifier: Apache-2.0
"""Model-runner side pieces of the fork (not speculators): model states,
the draft-prefill metadata cache and the DBO microbatch splitter."""

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
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.model_states.default import DefaultModelState
from vllm.v1.worker.gpu.model_states.interface import ModelSpecificAttnMetadata
from vllm.v1.worker.utils import AttentionGroup


class PaddedUbatchModelState(DefaultModelState):
    """Model state for DBO deployments: microbatches always run at the agreed
    padded width, so attention is built at that width too."""

    # idiom: DefaultModelState.prepare_attn with the `if cudagraph_mode == FULL` branch dropped: input_batch.num_tokens_after_padding reaches build_attn_metadata for eager/PIECEWISE batches as well
    # expect: SG103
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        num_tokens = input_batch.num_tokens_after_padding
        query_start_loc_cpu = torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        )
        max_query_len = input_batch.max_query_len or int(
            input_batch.num_scheduled_tokens.max()
        )
        seq_lens_cpu_upper_bound = input_batch.seq_lens_cpu_upper_bound
        max_seq_len = (
            self.max_model_len
            if for_capture
            else int(seq_lens_cpu_upper_bound[:num_reqs].max())
        )
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
        )


class GuardedModelState(DefaultModelState):
    """Same model state with upstream's FULL-only padding."""

    # idiom: DefaultModelState.prepare_attn: padded (num_reqs_after_padding, num_tokens_after_padding) only when cudagraph_mode == FULL, chosen by a conditional expression and tuple unpacking; the target's own input_batch.dcp_local_seq_lens; non-speculator sink call
    # expect: clean
    def prepare_attn(
        self,
        input_batch: InputBatch,
        cudagraph_mode: CUDAGraphMode,
        block_tables: tuple[torch.Tensor, ...],
        slot_mappings: torch.Tensor,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        for_capture: bool = False,
        ubatch_idx: int = 0,
        model_specific_attn_metadata: ModelSpecificAttnMetadata | None = None,
    ) -> dict[str, Any]:
        num_reqs, num_tokens = (
            (input_batch.num_reqs_after_padding, input_batch.num_tokens_after_padding)
            if cudagraph_mode == CUDAGraphMode.FULL
            else (input_batch.num_reqs, input_batch.num_tokens)
        )
        query_start_loc_cpu = torch.from_numpy(
            input_batch.query_start_loc_np[: num_reqs + 1]
        )
        max_query_len = input_batch.max_query_len or int(
            input_batch.num_scheduled_tokens.max()
        )
        seq_lens_cpu_upper_bound = input_batch.seq_lens_cpu_upper_bound
        return build_attn_metadata(
            attn_groups=attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=max_query_len,
            seq_lens=input_batch.seq_lens,
            max_seq_len=(
                self.max_model_len
                if for_capture
                else int(seq_lens_cpu_upper_bound[:num_reqs].max())
            ),
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=kv_cache_config,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
            positions=input_batch.positions,
            is_prefilling=torch.from_numpy(input_batch.is_prefilling_np),
            for_cudagraph_capture=for_capture,
            ubatch_idx=ubatch_idx,
            model_specific_attn_metadata=model_specific_attn_metadata,
        )


class DraftPrefillMetadataCache:
    """Rebuilds the target-shaped metadata the draft prefill reuses when the
    drafter runs on a separate stream (no speculator state)."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        max_num_tokens: int,
        max_model_len: int,
    ) -> None:
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.block_tables = block_tables
        self.max_num_tokens = max_num_tokens
        self.max_model_len = max_model_len

    # idiom: FastPrefillHelper.prepare's min(desc.num_tokens, self.max_num_tokens) (padded count clamped to capacity) used as num_tokens of build_attn_metadata with no check of the descriptor's cg_mode
    # expect: SG103
    def build(
        self, input_batch: InputBatch, batch_desc: BatchExecutionDescriptor
    ) -> dict[str, Any]:
        num_reqs = input_batch.num_reqs
        num_tokens = min(batch_desc.num_tokens, self.max_num_tokens)
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=input_batch.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(
                input_batch.query_start_loc_np[: num_reqs + 1]
            ),
            max_query_len=int(input_batch.num_scheduled_tokens.max()),
            seq_lens=input_batch.seq_lens,
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            dcp_local_seq_lens=input_batch.dcp_local_seq_lens,
        )


class DraftMetadataReplay:
    """Offline replay of recorded draft batches (benchmarks); mirrors the
    speculator helper's signature but is not a speculator."""

    def __init__(
        self,
        attn_groups: list[list[AttentionGroup]],
        kv_cache_config: KVCacheConfig,
        block_tables: BlockTables,
        input_buffers: InputBuffers,
        max_model_len: int,
    ) -> None:
        self.attn_groups = attn_groups
        self.kv_cache_config = kv_cache_config
        self.block_tables = block_tables
        self.input_buffers = input_buffers
        self.max_model_len = max_model_len

    # idiom: a non-speculator class defining a method named _build_attn_metadata (same signature as the speculator helper) that calls build_attn_metadata with the real token count from query_start_loc_np
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
    ) -> dict[str, Any]:
        num_tokens = int(query_start_loc_np[num_reqs])
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[: num_reqs + 1],
            query_start_loc_cpu=torch.from_numpy(query_start_loc_np[: num_reqs + 1]),
            max_query_len=int(np.diff(query_start_loc_np[: num_reqs + 1]).max()),
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            max_seq_len=self.max_model_len,
            block_tables=[x[:num_reqs] for x in self.block_tables.input_block_tables],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound[:num_reqs] + step,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class DraftUBatchSplitter:
    """Splits a draft batch for dual-batch overlap (model-runner side)."""

    def __init__(self, block_tables: BlockTables, dcp_size: int, max_num_reqs: int):
        self.block_tables = block_tables
        self.dcp_size = dcp_size
        self.ubatch_dcp_local_seq_lens = [
            torch.zeros(max_num_reqs, dtype=torch.int32) for _ in range(2)
        ]

    # idiom: vllm/v1/worker/gpu/ubatch_utils.py slice_input_batch: the model runner (not a speculator) prepares each microbatch's DCP lengths with prepare_dcp_local_seq_lens
    # expect: clean
    def microbatch_dcp_lens(
        self,
        seq_lens: torch.Tensor,
        num_reqs: int,
        num_reqs_padded: int,
        ubatch_idx: int,
    ) -> torch.Tensor | None:
        if self.dcp_size <= 1:
            return None
        return prepare_dcp_local_seq_lens(
            self.ubatch_dcp_local_seq_lens[ubatch_idx],
            seq_lens,
            num_reqs,
            self.dcp_size,
            self.block_tables.cp_rank,
            self.block_tables.cp_interleave,
            num_reqs_padded=num_reqs_padded,
        )
