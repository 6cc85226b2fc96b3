# SPDX-License-Identifier: Apache-2.0
"""Speculator bases the fork has carried across rebases.

Upstream keeps one base (``DraftModelSpeculator``) that owns the shared draft
attention-metadata helpers. The fork grew a few families whose drafters were
written against older helper signatures; each family below owns its own copy
of the shared helpers, on top of ``SpeculatorStateMixin``'s buffers.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator

from blindobj8._dcp import refresh_rank_local_lens
from blindobj8._meta import uniform_query_start_loc
from blindobj8._spec_base import SpeculatorStateMixin

logger = init_logger(__name__)


class StepCachedDcpBase(SpeculatorStateMixin, BaseSpeculator):
    """Base for EAGLE-style drafters that build metadata once per draft step."""

    # Rank-local view of input_buffers.dcp_local_seq_lens for this propose().
    _dcp_view: torch.Tensor | None = None

    def begin_propose(self) -> None:
        self._dcp_view = None

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; DCP view memoised on a class attribute across draft steps
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
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            # The view aliases input_buffers, so one preparation per propose()
            # is enough; later draft steps read the same storage.
            if self._dcp_view is None:
                self._dcp_view = prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            dcp_local_seq_lens = self._dcp_view
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
            positions=self.input_buffers.positions[:num_tokens],
            is_prefilling=self.draft_is_prefilling[:num_reqs_padded],
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; uniform layout delegating to the sibling helper
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
            query_start_loc_np=uniform_query_start_loc(
                self.arange_np, num_reqs, num_query_per_req
            ),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class TargetLensBase(SpeculatorStateMixin, BaseSpeculator):
    """Base for MTP heads whose first draft step runs over the target batch."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py _build_draft_attn_metadata (DCP recompute); step-0 branch reuses the target runner's rank-local buffer
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
        if batch_desc.cg_mode == CUDAGraphMode.FULL:
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[-1])
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            if step == 0:
                # Step 0 drafts over the target's own batch; the model runner
                # prepared these rank-local lengths earlier this iteration.
                dcp_local_seq_lens = self.target_input_buffers.dcp_local_seq_lens
            else:
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
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class PreDcpLegacyBase(SpeculatorStateMixin, BaseSpeculator):
    """Legacy helper signature kept for out-of-tree drafters (pre-DCP rebase)."""

    # idiom: vllm 0.28.0 vllm/v1/worker/gpu/spec_decode/speculator.py BaseSpeculator._build_draft_attn_metadata; sink call rebased from before DCP, lengths never forwarded
    # expect: SG105
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int = 1,
        causal: bool | Mapping[int, bool] = True,
        query_start_loc_np: np.ndarray | None = None,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        if query_start_loc_np is None:
            query_start_loc_np = uniform_query_start_loc(
                self.arange_np, num_reqs, num_query_per_req
            )
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens_padded,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=self.draft_max_seq_len,
            block_tables=views.block_tables,
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens_padded],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class ScratchDcpBase(SpeculatorStateMixin, BaseSpeculator):
    """Base that keeps the runner's DCP buffer intact for the verifier."""

    def __init__(self, vllm_config, device) -> None:
        super().__init__(vllm_config, device)
        self._dcp_scratch = torch.zeros(
            self.max_num_reqs, dtype=torch.int32, device=device
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; preparation writes a scratch buffer, the build reads another one
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
        is_full = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_tokens = batch_desc.num_tokens if is_full else int(query_start_loc_np[-1])
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            prepare_dcp_local_seq_lens(
                self._dcp_scratch,
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
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class InPlaceUpdateBase(SpeculatorStateMixin, BaseSpeculator):
    """Base for drafters whose builders can refresh decode metadata in place."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata + _update_draft_decode_metadata; recompute guarded by the in-place-update capability flag
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
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        query_start_loc_np = self.arange_np[: num_reqs + 1] * num_query_per_req
        num_tokens = (
            batch_desc.num_tokens
            if batch_desc.cg_mode == CUDAGraphMode.FULL
            else num_reqs * num_query_per_req
        )
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            if self.supports_decode_metadata_update:
                dcp_local_seq_lens = self._rank_local.refresh(num_reqs)
            else:
                # Eager rebuild: the runner's DCP prep already filled the buffer.
                dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class PortableDcpBase(SpeculatorStateMixin, BaseSpeculator):
    """Base used on platforms where the Triton DCP kernel may be missing."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; try/except around the preparation with a fallback to the target's buffer
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
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            try:
                dcp_local_seq_lens = prepare_dcp_local_seq_lens(
                    self.input_buffers.dcp_local_seq_lens,
                    self.input_buffers.seq_lens,
                    num_reqs,
                    self.dcp_size,
                    self.block_tables.cp_rank,
                    self.block_tables.cp_interleave,
                )
            except (RuntimeError, NotImplementedError):
                logger.warning_once(
                    "DCP local-length kernel unavailable; reusing the target "
                    "runner's rank-local lengths for the draft."
                )
                dcp_local_seq_lens = self.target_input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class HolderDcpBase(SpeculatorStateMixin, BaseSpeculator):
    """Base whose helpers go through the RankLocalLens holder."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; walrus on the caller's lengths, recompute through a holder object's method
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
        full = batch_desc.cg_mode == CUDAGraphMode.FULL
        num_tokens = batch_desc.num_tokens if full else int(query_start_loc_np[-1])
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if (lens := dcp_local_seq_lens) is None and self._rank_local.enabled:
            lens = self._rank_local.bind(num_reqs).fresh
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=None if lens is None else lens[:num_reqs_padded],
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=(
                slot_mappings
                if slot_mappings is not None
                else self.block_tables.slot_mappings[:, :num_tokens]
            ),
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; builds directly, lengths recomputed by a function of another module
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
        num_reqs_padded = batch_desc.num_reqs or num_reqs
        query_start_loc_np = uniform_query_start_loc(
            self.arange_np, num_reqs, num_query_per_req
        )
        if batch_desc.cg_mode != CUDAGraphMode.FULL:
            num_tokens = num_reqs * num_query_per_req
        else:
            num_tokens = batch_desc.num_tokens
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None:
            dcp_local_seq_lens = refresh_rank_local_lens(
                self.input_buffers,
                self.block_tables,
                num_reqs,
                self.dcp_size,
                num_reqs_padded=num_reqs_padded,
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=num_query_per_req,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=dcp_local_seq_lens,
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class AnyGraphBase(SpeculatorStateMixin, BaseSpeculator):
    """Base for drafters captured with both FULL and PIECEWISE graphs."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; truthiness of CUDAGraphMode (PIECEWISE is truthy) picks the padded count
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
        # Any captured graph replays the dispatched shape.
        num_tokens = (
            batch_desc.num_tokens if batch_desc.cg_mode else int(query_start_loc_np[-1])
        )
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
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
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class ConfigModeBase(SpeculatorStateMixin, BaseSpeculator):
    """Base that reads the configured graph mode once at construction."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; guard tests the configured cudagraph_mode, value comes from the batch descriptor
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
        if self.cudagraph_mode.has_full_cudagraphs():
            num_tokens = batch_desc.num_tokens
        else:
            num_tokens = int(query_start_loc_np[-1])
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if slot_mappings is None:
            slot_mappings = self.block_tables.slot_mappings[:, :num_tokens]
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = refresh_rank_local_lens(
                self.input_buffers, self.block_tables, num_reqs, self.dcp_size
            )
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )


class MatchModeBase(SpeculatorStateMixin, BaseSpeculator):
    """Base written against the runtime-mode enum with a match statement."""

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_attn_metadata; match on batch_desc.cg_mode, kwargs assembled in a dict
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
            case CUDAGraphMode.PIECEWISE | CUDAGraphMode.NONE:
                num_tokens = int(query_start_loc_np[-1])
            case other:
                raise ValueError(f"{other} is not a runtime cudagraph mode")
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        kwargs: dict[str, Any] = dict(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=min(self.draft_max_seq_len, self.max_model_len),
            block_tables=views.block_tables,
            slot_mappings=(
                self.block_tables.slot_mappings[:, :num_tokens]
                if slot_mappings is None
                else slot_mappings
            ),
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
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
        if dcp_local_seq_lens is not None:
            kwargs["dcp_local_seq_lens"] = dcp_local_seq_lens[:num_reqs_padded]
        return build_attn_metadata(**kwargs)


class LegacyDraftBase(SpeculatorStateMixin, BaseSpeculator):
    """Base that still speaks the pre-0.30 helper signature.

    Callers pick ``num_tokens_padded`` themselves: the padded count only for a
    FULL graph replay, the real query count otherwise.
    """

    # idiom: vllm 0.29.0 vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_draft_attn_metadata; legacy signature, caller-chosen count, DCP recompute when not handed lengths
    # expect: clean
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int = 1,
        causal: bool | Mapping[int, bool] = True,
        query_start_loc_np: np.ndarray | None = None,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        if query_start_loc_np is None:
            query_start_loc_np = uniform_query_start_loc(
                self.arange_np, num_reqs, num_query_per_req
            )
        views = self._draft_batch_views(
            num_reqs, num_reqs_padded, query_start_loc_np, seq_lens_cpu_upper_bound, step
        )
        if dcp_local_seq_lens is None and self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return build_attn_metadata(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs_padded,
            num_tokens=num_tokens_padded,
            query_start_loc_gpu=self.input_buffers.query_start_loc[
                : num_reqs_padded + 1
            ],
            query_start_loc_cpu=views.query_start_loc_cpu,
            max_query_len=views.max_query_len,
            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            dcp_local_seq_lens=(
                None
                if dcp_local_seq_lens is None
                else dcp_local_seq_lens[:num_reqs_padded]
            ),
            max_seq_len=self.draft_max_seq_len,
            block_tables=views.block_tables,
            slot_mappings=self.block_tables.slot_mappings[:, :num_tokens_padded],
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            seq_lens_cpu_upper_bound=views.seq_lens_cpu_upper_bound,
        )

    # idiom: vllm/v1/worker/gpu/spec_decode/speculator.py DraftModelSpeculator._build_uniform_attn_metadata; new-style entry point mapping a descriptor onto the legacy helper
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
        replay_padded = batch_desc.cg_mode == CUDAGraphMode.FULL
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=batch_desc.num_reqs or num_reqs,
            num_tokens_padded=(
                batch_desc.num_tokens if replay_padded else num_reqs * num_query_per_req
            ),
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            num_query_per_req=num_query_per_req,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )
