# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Block-parallel drafters (DFlash family) with local tweaks."""
import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.profiler import record_function

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from blindobj10.spec_decode.legacy_fork import LegacyDraftSpeculator

logger = init_logger(__name__)


class BlockDraftSpeculator(DFlashSpeculator):
    _speculator_name = "BlockDraft"

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
        # Every block carries the bonus token plus all mask tokens.
        return super()._build_uniform_attn_metadata(
            batch_desc=batch_desc,
            num_reqs=num_reqs,
            num_query_per_req=self.num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class OptionalAttnBlockSpeculator(DFlashSpeculator):
    _speculator_name = "OptionalAttnBlock"

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


class TolerantBlockSpeculator(DFlashSpeculator):
    _speculator_name = "TolerantBlock"

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
        with contextlib.suppress(AssertionError):
            return super()._build_uniform_attn_metadata(
                batch_desc,
                num_reqs,
                num_query_per_req,
                seq_lens_cpu_upper_bound,
                step,
                causal,
                dcp_local_seq_lens,
            )


class NonCausalBlockSpeculator(DFlashSpeculator):
    _speculator_name = "NonCausalBlock"

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
            batch_desc,
            num_reqs,
            num_query_per_req,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
        )


class CompiledBlockSpeculator(DFlashSpeculator):
    _speculator_name = "CompiledBlock"

    # expect: SG102
    @torch.compiler.disable
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


class TracedBlockSpeculator(DFlashSpeculator):
    _speculator_name = "TracedBlock"

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
        logger.debug(
            "%s draft metadata: num_reqs=%d desc=%s step=%d",
            self._speculator_name,
            num_reqs,
            batch_desc,
            step,
        )
        with record_function("block_draft_attn_metadata"):
            return super()._build_uniform_attn_metadata(
                batch_desc=batch_desc,
                num_reqs=num_reqs,
                num_query_per_req=num_query_per_req,
                seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
                step=step,
                causal=causal,
                dcp_local_seq_lens=dcp_local_seq_lens,
            )


class InferenceModeBlockSpeculator(DFlashSpeculator):
    _speculator_name = "InferenceModeBlock"

    # expect: clean
    @torch.inference_mode()
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
        assert num_reqs <= self.max_num_reqs, (
            f"{num_reqs} draft requests exceed max_num_seqs={self.max_num_reqs}"
        )
        metadata = super()._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step,
            causal,
            dcp_local_seq_lens,
            slot_mappings,
        )
        return metadata


class PassthroughBlockSpeculator(DFlashSpeculator):
    _speculator_name = "PassthroughBlock"

    # expect: clean
    def _build_uniform_attn_metadata(self, *args: Any, **kwargs: Any):
        if batch_desc := kwargs.get("batch_desc"):
            logger.debug_once(
                "Block draft runs with cudagraph mode %s", batch_desc.cg_mode
            )
        return super()._build_uniform_attn_metadata(*args, **kwargs)


class LegacyBlockSpeculator(LegacyDraftSpeculator):
    """Block drafter on the legacy metadata interface."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        self.num_query_per_req = 1 + self.num_speculative_steps

    # expect: SG102
    def _build_draft_attn_metadata(
        self,
        num_reqs: int,
        num_reqs_padded: int,
        num_tokens_padded: int,
        seq_lens_cpu_upper_bound: torch.Tensor,
        step: int,
        num_query_per_req: int | None = None,
        causal: bool | Mapping[int, bool] = True,
        query_start_loc_np: np.ndarray | None = None,
        dcp_local_seq_lens: torch.Tensor | None = None,
    ) -> dict[str, Any] | None:
        if not self.draft_attn_layer_names:
            return None
        assert num_query_per_req is not None
        return super()._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs_padded,
            num_tokens_padded=num_reqs_padded * num_query_per_req,
            seq_lens_cpu_upper_bound=seq_lens_cpu_upper_bound,
            step=step,
            num_query_per_req=num_query_per_req,
            causal=causal,
            query_start_loc_np=query_start_loc_np,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )


class DraftMetadataRecorder:
    """Test double that records the metadata requests of a speculator."""

    def __init__(self, speculator: DraftModelSpeculator):
        self.speculator = speculator
        self.calls: list[dict[str, Any]] = []

    # expect: clean
    def _build_attn_metadata(self, **kwargs: Any) -> dict[str, Any] | None:
        self.calls.append(kwargs)
        return None
