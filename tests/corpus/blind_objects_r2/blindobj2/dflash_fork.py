# DFlash (parallel block drafting) variants.
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState, dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator

from blindobj2._pad import ceil_align, refresh_dcp_lens

logger = init_logger(__name__)


class CausalDFlashSpeculator(DFlashSpeculator):
    """DFlash fork that runs the query block causally on every backend."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: SG102
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
            causal=True,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class CheckedDFlashSpeculator(DFlashSpeculator):
    """DFlash fork with extra shape validation."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
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
        assert num_query_per_req == self.num_query_per_req, (
            f"DFlash query block is {self.num_query_per_req}, got {num_query_per_req}"
        )
        assert num_reqs <= self.max_num_reqs
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class ExtraSlotDFlashSpeculator(DFlashSpeculator):
    """Reserves an anchor slot per request in the query block."""

    num_extra_query_per_req: int = 1

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata
    # expect: SG102
    def _build_uniform_attn_metadata(self, batch_desc, num_reqs, num_query_per_req,
                                     seq_lens_cpu_upper_bound, step, causal=True,
                                     dcp_local_seq_lens=None):
        width = num_query_per_req + self.num_extra_query_per_req
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            width,
            seq_lens_cpu_upper_bound,
            step + self.num_extra_query_per_req,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class RecordingDFlashSpeculator(DFlashSpeculator):
    """Keeps the last metadata around for debugging dumps."""

    # idiom: vllm v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata
    # expect: clean
    def _build_attn_metadata(self, *args, **kwargs) -> dict[str, Any] | None:
        md = super()._build_attn_metadata(*args, **kwargs)
        self._last_attn_metadata = md
        if md is not None:
            logger.debug("dflash draft metadata for %d layers", len(md))
        return md


class DPDFlashSpeculator(DFlashSpeculator):
    """DFlash with DP-aligned query passes."""

    def _dispatch(self, num_reqs: int, dp_sync_state: DPSyncState | None,
                  is_profile: bool) -> tuple[BatchExecutionDescriptor, DPSyncState | None]:
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

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _query_md(
        self,
        input_batch,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        batch_desc, _ = self._dispatch(num_reqs, dp_sync_state, is_profile)
        is_full_cudagraph = batch_desc.cg_mode == CUDAGraphMode.FULL
        md = None
        if not (is_full_cudagraph and self.supports_decode_metadata_update):
            md = self._build_uniform_attn_metadata(
                num_reqs=num_reqs,
                batch_desc=batch_desc,
                num_query_per_req=self.num_query_per_req,
                seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
                step=self.num_query_per_req,
                causal=self._group_causal,
            )
        return batch_desc, md

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG103
    def _query_md_capability_guard(
        self,
        input_batch,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        batch_desc, _ = self._dispatch(num_reqs, dp_sync_state, is_profile)
        # In-place-updatable backends were captured FULL, so build FULL-shaped.
        md_desc = BatchExecutionDescriptor(
            cg_mode=(
                CUDAGraphMode.FULL
                if self.supports_decode_metadata_update
                else batch_desc.cg_mode
            ),
            num_tokens=batch_desc.num_tokens,
            num_reqs=batch_desc.num_reqs,
            uniform_token_count=self.num_query_per_req,
        )
        md = self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=md_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        return batch_desc, md

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG103
    def _query_md_padded_reqs(
        self,
        input_batch,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        batch_desc, _ = self._dispatch(num_reqs, dp_sync_state, is_profile)
        # Build for the padded request count so graph-padded rows get a query
        # block too.
        num_reqs_padded = batch_desc.num_reqs or ceil_align(num_reqs, 8)
        md = self._build_uniform_attn_metadata(
            num_reqs=num_reqs_padded,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        return batch_desc, md

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _query_md_padded_reqs_full(
        self,
        input_batch,
        num_reqs: int,
        dp_sync_state: DPSyncState | None,
        is_profile: bool = False,
    ) -> tuple[BatchExecutionDescriptor, dict[str, Any] | None]:
        batch_desc, _ = self._dispatch(num_reqs, dp_sync_state, is_profile)
        # Tokens handed to the model may be padded; attention is not.
        self._num_tokens_padded = ceil_align(batch_desc.num_tokens, 8)
        md = self._build_uniform_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=input_batch.seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )
        return batch_desc, md


class CachedDescDFlashSpeculator(DFlashSpeculator):
    """Remembers the descriptor of the last FULL replay per request count."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._full_descs: dict[int, BatchExecutionDescriptor] = {}

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG103
    def _md_with_cached_desc(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            self._full_descs[num_reqs] = batch_desc
        desc = self._full_descs.get(num_reqs, batch_desc)
        return self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _md_with_cached_desc_checked(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            self._full_descs[num_reqs] = batch_desc
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=self.num_query_per_req,
            causal=self._group_causal,
        )


class DcpDFlashSpeculator(DFlashSpeculator):
    """DFlash for DCP: query block attends over rank-local context."""

    def _iter_steps(self, num_reqs: int) -> Iterator[tuple[int, torch.Tensor | None]]:
        for step in range(self.num_query_per_req, self.num_query_per_req + 1):
            yield step, refresh_dcp_lens(self, num_reqs)

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG104
    def _dcp_query_md_gen(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> list[dict[str, Any] | None]:
        mds = []
        for step, _dcp in self._iter_steps(num_reqs):
            mds.append(
                self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=self.num_query_per_req,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    causal=self._group_causal,
                )
            )
        return mds

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _dcp_query_md_gen_passed(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> list[dict[str, Any] | None]:
        mds = []
        for step, dcp in self._iter_steps(num_reqs):
            mds.append(
                self._build_uniform_attn_metadata(
                    batch_desc=batch_desc,
                    num_reqs=num_reqs,
                    num_query_per_req=self.num_query_per_req,
                    seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                    step=step,
                    causal=self._group_causal,
                    dcp_local_seq_lens=dcp,
                )
            )
        return mds

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: SG105
    def _dcp_query_md_target_lens(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        target_lens = self.target_input_buffers.dcp_local_seq_lens
        md_kwargs = {
            "batch_desc": batch_desc,
            "num_reqs": num_reqs,
            "num_query_per_req": self.num_query_per_req,
            "seq_lens_cpu_upper_bound": seq_lens_cpu_upper_bound,
            "step": self.num_query_per_req,
            "causal": self._group_causal,
            "dcp_local_seq_lens": target_lens if self.dcp_size > 1 else None,
        }
        return self._build_uniform_attn_metadata(**md_kwargs)

    # idiom: vllm v1/worker/gpu/spec_decode/dflash/speculator.py DFlashSpeculator.propose
    # expect: clean
    def _dcp_query_md_own_lens(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
    ) -> dict[str, Any] | None:
        own_lens = None
        if self.dcp_size > 1:
            own_lens = prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
        md_kwargs = {
            "batch_desc": batch_desc,
            "num_reqs": num_reqs,
            "num_query_per_req": self.num_query_per_req,
            "seq_lens_cpu_upper_bound": seq_lens_cpu_upper_bound,
            "step": self.num_query_per_req,
            "causal": self._group_causal,
            "dcp_local_seq_lens": own_lens,
        }
        return self._build_uniform_attn_metadata(**md_kwargs)
