# SPDX-License-Identifier: Apache-2.0
"""Speculator bases for the fork's out-of-tree platform runners.

The XPU/HPU/NPU runners cannot import ``DraftModelSpeculator`` (its module
pulls CUDA-only acceptance/watermark code), so each platform carries a port of
its shared attention-metadata helpers on top of the abstract ``BaseSpeculator``.
The ports were taken from different upstream snapshots and have drifted.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator
from vllm.v1.worker.utils import AttentionGroup


class _DraftStateMixin:
    """Buffers every platform port needs; not a speculator by itself."""

    attn_groups: list[list[AttentionGroup]]
    block_tables: BlockTables
    kv_cache_config: KVCacheConfig

    def _init_draft_state(self, vllm_config: VllmConfig, device: torch.device) -> None:
        self.vllm_config = vllm_config
        self.device = device
        self.max_num_reqs = vllm_config.scheduler_config.max_num_seqs
        self.max_num_tokens = vllm_config.scheduler_config.max_num_batched_tokens
        self.max_model_len = vllm_config.model_config.max_model_len
        self.draft_max_seq_len = self.max_model_len
        self.dcp_size = vllm_config.parallel_config.decode_context_parallel_size
        self.input_buffers = InputBuffers(
            max_num_reqs=self.max_num_reqs,
            max_num_tokens=self.max_num_tokens,
            device=device,
        )
        self.arange_np = np.arange(self.max_num_reqs + 1, dtype=np.int32)
        self.draft_is_prefilling = torch.zeros(self.max_num_reqs, dtype=torch.bool)

    def _draft_seq_lens_upper_bound(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
    ) -> torch.Tensor:
        upper = torch.zeros(num_reqs_padded, dtype=torch.int32, device="cpu")
        torch.add(seq_lens_cpu_upper_bound[:num_reqs], step, out=upper[:num_reqs])
        upper[:num_reqs].clamp_(max=self.max_model_len)
        return upper

    def _query_start_loc_cpu(
        self, num_reqs: int, num_reqs_padded: int, query_start_loc_np: np.ndarray
    ) -> torch.Tensor:
        qsl = torch.empty(num_reqs_padded + 1, dtype=torch.int32)
        qsl[: num_reqs + 1] = torch.from_numpy(query_start_loc_np[: num_reqs + 1])
        qsl[num_reqs:] = qsl[num_reqs]
        return qsl


class PortedDraftSpeculatorBase(_DraftStateMixin, BaseSpeculator):
    """Reference port, kept in step with upstream 0.33."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self._init_draft_state(vllm_config, device)

    # idiom: DraftModelSpeculator._build_attn_metadata (0.33.0) ported; DCP lengths recomputed into the InputBuffers buffer and that buffer handed to the sink; FULL-only padded count
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
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[-1])
        query_start_loc_cpu = self._query_start_loc_cpu(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        max_query_len = int((query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max())
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            # Writes into the persistent buffer; the buffer is then current.
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
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
            seq_lens_cpu_upper_bound=self._draft_seq_lens_upper_bound(
                num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
            ),
            positions=self.input_buffers.positions[:num_tokens],
            is_prefilling=self.draft_is_prefilling[:num_reqs_padded],
        )

    # idiom: DraftModelSpeculator._build_uniform_attn_metadata (0.33.0) ported verbatim: arange_np * num_query_per_req, caller's DCP lengths forwarded
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
        query_start_loc_np = self.arange_np[: num_reqs + 1] * num_query_per_req
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class XpuDraftSpeculatorBase(_DraftStateMixin, BaseSpeculator):
    """XPU port. Skips the DCP kernel launch on later draft steps to save a
    launch per step ("seq_lens only moved by one")."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self._init_draft_state(vllm_config, device)

    # idiom: DraftModelSpeculator._build_attn_metadata port whose DCP recompute only runs on draft step 0; later steps reuse the InputBuffers state left by step 0 / the target
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
        query_start_loc_cpu = self._query_start_loc_cpu(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            if step == 0:
                dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            else:
                # Rank-local lengths change by at most one token per step.
                dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(
                (query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max()
            ),
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=self.draft_max_seq_len,
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=self._draft_seq_lens_upper_bound(
                num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
            ),
        )

    # idiom: DraftModelSpeculator._build_uniform_attn_metadata port that forwards the caller's dcp_local_seq_lens (possibly None) untouched via a kwargs dict
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
        kwargs: dict[str, Any] = dict(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
        )
        kwargs.update(dcp_local_seq_lens=dcp_local_seq_lens)
        return self._build_attn_metadata(
            query_start_loc_np=self.arange_np[: num_reqs + 1] * num_query_per_req,
            **kwargs,
        )


class HpuDraftSpeculatorBase(_DraftStateMixin, BaseSpeculator):
    """HPU port, taken from the 0.28 snapshot (before the DFlash DP>1 fix):
    HPU graphs are always bucketed, so the port always uses the bucket size."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self._init_draft_state(vllm_config, device)

    # idiom: vLLM 0.28.0 _build_draft_attn_metadata semantics kept in a port: sink gets batch_desc.num_tokens (graph/DP padded) whatever the descriptor's cg_mode
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
        # Bucketed graphs: attention always sees the bucket.
        num_tokens_padded = batch_desc.num_tokens
        query_start_loc_cpu = self._query_start_loc_cpu(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens_padded]
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
            num_tokens=num_tokens_padded,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(
                (query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max()
            ),
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=dcp_local_seq_lens,
            max_seq_len=self.draft_max_seq_len,
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=self._draft_seq_lens_upper_bound(
                num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
            ),
        )

    # idiom: uniform helper port that "reuses the target's prepared DCP lengths" by defaulting dcp_local_seq_lens to self.input_buffers' buffer, which suppresses the recompute in _build_attn_metadata
    # expect: SG105
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
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return self._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=self.arange_np[: num_reqs + 1] * num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class NpuDraftSpeculatorBase(_DraftStateMixin, BaseSpeculator):
    """NPU port from before DCP landed for drafters."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        self._init_draft_state(vllm_config, device)

    # idiom: pre-DCP port of DraftModelSpeculator._build_attn_metadata: the sink call never receives dcp_local_seq_lens (the parameter is accepted and dropped), so DCP builders fall back to stale/global lengths
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
        del dcp_local_seq_lens  # TODO(npu): DCP for drafters
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else int(query_start_loc_np[-1])
        )
        query_start_loc_cpu = self._query_start_loc_cpu(
            num_reqs, num_reqs_padded, query_start_loc_np
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=query_start_loc_cpu,
            max_query_len=int(
                (query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max()
            ),
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=self.draft_max_seq_len,
            block_tables=[
                x[:num_reqs_padded] for x in self.block_tables.input_block_tables
            ],
            slot_mappings=(
                self.block_tables.slot_mappings[:, :num_tokens]
                if slot_mappings is None
                else slot_mappings
            ),
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=self._draft_seq_lens_upper_bound(
                num_reqs, num_reqs_padded, seq_lens_cpu_upper_bound, step
            ),
        )
