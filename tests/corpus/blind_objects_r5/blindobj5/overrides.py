# SPDX-License-Identifier: Apache-2.0
"""Drafters that wrap the base speculator's shared metadata helpers."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from vllm.logger import init_logger
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator
from vllm.v1.worker.gpu.spec_decode.multi_module_mtp.speculator import (
    MultiModuleMTPSpeculator,
)
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import (
    StandaloneARSpeculator,
)

logger = init_logger(__name__)


class NonCausalDefaultDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter whose blocks default to non-causal attention."""

    # idiom: _build_uniform_attn_metadata override that forwards every argument unchanged but declares causal=False where the base's default is True (a default the base does not give)
    # expect: SG102
    def _build_uniform_attn_metadata(
        self,
        batch_desc: BatchExecutionDescriptor,
        num_reqs: int,
        num_query_per_req: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        causal: bool | Mapping[int, bool] = False,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class GuardedDFlashSpeculator(DFlashSpeculator):
    """DFlash drafter keeping 0.28's no-draft-layer guard."""

    # idiom: vLLM 0.28 DFlashSpeculator._build_draft_attn_metadata override ("Not needed", deleted upstream): early `return None` when draft_attn_layer_names is empty, else forwards
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
        if not self.draft_attn_layer_names:
            return None
        assert num_query_per_req is not None
        return super()._build_uniform_attn_metadata(
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
        )


class ProfiledEagleSpeculator(EagleSpeculator):
    """EAGLE drafter that profiles and caches its metadata build."""

    _last_attn_metadata: dict[str, Any] | None = None

    # idiom: _build_attn_metadata override wrapped in torch.profiler.record_function that stores the base result on self but falls off its end (returns None)
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
        with torch.profiler.record_function("eagle_draft_attn_metadata"):
            attn_metadata = super()._build_attn_metadata(
                num_reqs,
                batch_desc,
                query_start_loc_np,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
                slot_mappings,
            )
        self._last_attn_metadata = attn_metadata


class NonUniformOnlyMultiMTPSpeculator(MultiModuleMTPSpeculator):
    """Multi-module MTP drafter that forbids the uniform layout."""

    # idiom: MultiModuleMTPSpeculator keeps mixed prefill/decode layouts; override of _build_uniform_attn_metadata that raises NotImplementedError
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
        raise NotImplementedError(
            "multi-module MTP builds non-uniform metadata from "
            "input_batch.query_start_loc_np; use _build_attn_metadata"
        )


class CorrectionStepStandaloneSpeculator(StandaloneARSpeculator):
    """Standalone AR drafter that always counts the correction token."""

    # idiom: StandaloneARSpeculator._multi_step_decode's `step=step + 1` (correction token) moved into a _build_uniform_attn_metadata override that forwards a modified step
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
        # Include the correction token inserted during prefill.
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step + 1,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class LegacyDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter keeping the pre-0.33 helper name for fork call sites."""

    # idiom: legacy _build_draft_attn_metadata(num_reqs, num_reqs_padded, num_tokens_padded, ...) kept in a subclass as a shim onto the new uniform helper (the legacy helper name is itself an override)
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
        batch_desc: BatchExecutionDescriptor | None = None,
    ) -> dict[str, Any] | None:
        assert batch_desc is not None, "callers must pass the dispatched descriptor"
        return self._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req or self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
        )


class FallbackMTPSpeculator(MTPSpeculator):
    """MTP drafter that keeps drafting when a backend refuses the build."""

    # idiom: _build_attn_metadata override with try/except that swallows the backend's error and returns None on that path
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
        try:
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
        except ValueError:
            logger.warning_once("draft attention metadata build failed; skipping")
            return None


class RecordingEagleSpeculator(EagleSpeculator):
    """EAGLE drafter that records helper calls for the fork's tests."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.md_calls: list[tuple[int, int, int]] = []

    # idiom: observe-only _build_attn_metadata override (the MethodType fake in tests/v1/spec_decode/test_eagle_draft_attn_metadata.py, kept in-tree): records and asserts on its arguments, forwards each unchanged, returns the result
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
        assert num_reqs <= self.max_num_reqs
        self.md_calls.append((num_reqs, batch_desc.num_tokens, step))
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


class TracedDSparkSpeculator(DSparkSpeculator):
    """DSpark drafter with profiler ranges around the metadata build."""

    # idiom: observe-only _build_uniform_attn_metadata override returning the base result from inside a `with torch.profiler.record_function(...)` block, arguments unchanged, same defaults
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
        with torch.profiler.record_function(f"{self._speculator_name}_attn_md"):
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )


class NvtxMTPSpeculator(MTPSpeculator):
    """MTP drafter with NVTX ranges (nsys traces)."""

    # idiom: *args/**kwargs pass-through override inside `with torch.cuda.nvtx.range(...)`, forwarding every argument unchanged and returning the base result
    # expect: clean
    def _build_attn_metadata(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        with torch.cuda.nvtx.range("mtp_draft_attn_metadata"):
            return super()._build_attn_metadata(*args, **kwargs)


class AssertingDFlash2Speculator(DFlash2Speculator):
    """DFlash2 drafter asserting its fixed query width."""

    # idiom: override that asserts the uniform width (num_query_per_req == self.num_query_per_req, the assertion the deleted DFlash override had) and forwards every argument by keyword, same defaults
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
            f"{self._speculator_name} queries are {self.num_query_per_req} wide"
        )
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )
