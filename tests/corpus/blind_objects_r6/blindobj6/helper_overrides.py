# SPDX-License-Identifier: Apache-2.0
"""Drafters that customise the shared draft-metadata helpers.

Some of these predate upstream's consolidation (vLLM 0.28's DFlash override of
``_build_draft_attn_metadata``); others only instrument the helpers.
"""

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)

logger = init_logger(__name__)


class CorrectionSlotDFlashSpeculator(DFlashSpeculator):
    """DFlash with one extra correction slot per request (fork feature)."""

    num_extra_query_per_req = 1

    # idiom: vLLM 0.28 DFlashSpeculator._build_draft_attn_metadata override that replaced the caller's num_query_per_req with its own; here widening the uniform helper's query block by num_extra_query_per_req
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
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req + self.num_extra_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class NoDraftLayerDSparkSpeculator(DSparkSpeculator):
    # idiom: the deleted vLLM 0.28 DFlash override's `if not self.draft_attn_layer_names: return None` early return, ported onto _build_attn_metadata
    # expect: SG102
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
        if not self.draft_attn_layer_names:
            return None
        return super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
            slot_mappings,
        )


class NoDcpEagleSpeculator(EagleSpeculator):
    # idiom: uniform-helper override refusing DCP drafting with raise NotImplementedError on one path before delegating unchanged
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
        if self.dcp_size > 1 and dcp_local_seq_lens is None:
            raise NotImplementedError(
                "The fork's Eagle head does not support DCP drafting yet."
            )
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class NonCausalDefaultDFlash2Speculator(DFlash2Speculator):
    # idiom: vLLM 0.28 DFlash override's `causal: ... = False` default, kept on a _build_attn_metadata override that otherwise forwards every argument by keyword
    # expect: SG102
    def _build_attn_metadata(
        self,
        num_reqs: int,
        batch_desc: BatchExecutionDescriptor,
        query_start_loc_np: np.ndarray,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = False,
        dcp_local_seq_lens: torch.Tensor | None = None,
        slot_mappings: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        return super()._build_attn_metadata(
            num_reqs=num_reqs,
            batch_desc=batch_desc,
            query_start_loc_np=query_start_loc_np,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
            slot_mappings=slot_mappings,
        )


class RetryingMTPSpeculator(MTPSpeculator):
    # idiom: uniform-helper override wrapping the base call in try/except that logs a FlashInfer plan failure and falls off its end (returns None) on that path
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
        try:
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal=causal,
                dcp_local_seq_lens=dcp_local_seq_lens,
            )
        except ValueError as e:
            # FlashInfer plan() rejects a mismatched qo_indptr; skip drafting
            # this step instead of failing the request.
            logger.warning("MTP draft metadata build failed: %s", e)


class LegacyDFlashSpeculator(DFlashSpeculator):
    # idiom: vLLM 0.28 DFlashSpeculator._build_draft_attn_metadata (legacy helper name) kept by a fork drafter for its own callers, rerouted to the uniform helper
    # expect: SG102
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int | None = None,
        causal: bool | Mapping[int, bool] = False,
        query_start_loc_np: np.ndarray | None = None,
    ) -> dict[str, Any] | None:
        if not self.draft_attn_layer_names:
            return None
        assert num_query_per_req is None  # Omitted for DFlash, read from self
        desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE,
            num_tokens=num_reqs * self.num_query_per_req,
            num_reqs=num_reqs,
        )
        return self._build_uniform_attn_metadata(
            batch_desc=desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
        )


# ---------------------------------------------------------------------------
# Observers: they see the helper's inputs but cannot change what is built.
# ---------------------------------------------------------------------------
class AuditedDSparkSpeculator(DSparkSpeculator):
    # idiom: observer override of the uniform helper: assert + logger.debug on its arguments, then super() with each argument unchanged
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
            f"DSpark expects {self.num_query_per_req} queries/request, "
            f"got {num_query_per_req}"
        )
        logger.debug(
            "DSpark draft metadata: mode=%s reqs=%d step=%d",
            batch_desc.cg_mode,
            num_reqs,
            step,
        )
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class ProfiledEagleSpeculator(EagleSpeculator):
    # idiom: observer override of _build_attn_metadata inside `with torch.profiler.record_function(...)`, returning super() with every argument unchanged
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
        with torch.profiler.record_function("eagle_draft_attn_metadata"):
            return super()._build_attn_metadata(
                num_reqs,
                batch_desc,
                query_start_loc_np,
                seq_lens_cpu_upper_bound,
                step,
                causal=causal,
                dcp_local_seq_lens=dcp_local_seq_lens,
                slot_mappings=slot_mappings,
            )


class TimedStandaloneSpeculator(StandaloneARSpeculator):
    metadata_build_s: float = 0.0

    # idiom: observer override timing the base helper: return super() inside try, accumulate elapsed time in finally (every path returns the base result or re-raises)
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
        start = time.perf_counter()
        try:
            return super()._build_attn_metadata(
                num_reqs,
                batch_desc,
                query_start_loc_np,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
                slot_mappings,
            )
        finally:
            self.metadata_build_s += time.perf_counter() - start


class UniformQueryLayout:
    """Not a speculator: the target-side helper the fork's encoder-only pooling
    path uses to lay out uniform query blocks (same method name as the
    speculator helper, unrelated class)."""

    def __init__(self, max_num_reqs: int):
        self.arange_np = np.arange(max_num_reqs + 1, dtype=np.int32)

    # idiom: a non-speculator class defining a method named like the shared helper (_build_uniform_attn_metadata) that only lays out query_start_loc
    # expect: clean
    def _build_uniform_attn_metadata(
        self, num_reqs: int, num_query_per_req: int
    ) -> dict[str, Any]:
        query_start_loc_np = self.arange_np[: num_reqs + 1] * num_query_per_req
        return {
            "query_start_loc_cpu": torch.from_numpy(query_start_loc_np),
            "max_query_len": num_query_per_req,
            "num_actual_tokens": int(query_start_loc_np[-1]),
        }


class RecordingMTPSpeculator(MTPSpeculator):
    _last_build_call: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    # idiom: observer override with *args/**kwargs pass-through (records the call for the fork's replay debugger, returns super() with the same arguments)
    # expect: clean
    def _build_attn_metadata(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        self._last_build_call = (args, dict(kwargs))
        return super()._build_attn_metadata(*args, **kwargs)
