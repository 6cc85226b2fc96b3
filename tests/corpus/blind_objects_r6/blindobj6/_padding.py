# SPDX-License-Identifier: Apache-2.0
"""Padding helpers shared by the fork's drafters and model states.

These used to live in the fork's ``gpu_model_runner`` patch; they were moved
here when the runner switched to the MRv2 ``BatchExecutionDescriptor``.
"""

import bisect
from collections.abc import Iterable
from functools import cached_property

import numpy as np

from vllm.config.compilation import CUDAGraphMode
from vllm.utils.math_utils import round_up
from vllm.v1.worker.gpu.input_batch import InputBatch


def pad_expanded_query_start_loc(
    target_query_start_loc_np: np.ndarray,
    arange_np: np.ndarray,
    num_reqs: int,
    alignment: int,
) -> tuple[np.ndarray, int]:
    """Expanded (one correction slot per request) query_start_loc whose last
    request absorbs the alignment padding, so FA's varlen split sees an
    ``alignment``-multiple total.

    Returns the offsets and the padded total.
    """
    query_start_loc_np = (
        target_query_start_loc_np[: num_reqs + 1] + arange_np[: num_reqs + 1]
    ).astype(np.int32, copy=True)
    total = int(query_start_loc_np[num_reqs])
    padded_total = round_up(total, alignment)
    query_start_loc_np[num_reqs] = padded_total
    return query_start_loc_np, padded_total


def expanded_query_start_loc(
    target_query_start_loc_np: np.ndarray,
    arange_np: np.ndarray,
    num_reqs: int,
) -> tuple[np.ndarray, int]:
    """Expanded query_start_loc without any padding."""
    query_start_loc_np = (
        target_query_start_loc_np[: num_reqs + 1] + arange_np[: num_reqs + 1]
    ).astype(np.int32, copy=True)
    return query_start_loc_np, int(query_start_loc_np[num_reqs])


def next_capture_size(capture_sizes: Iterable[int], n: int) -> int:
    """Smallest captured size >= n (SGLang's ``bisect_left(capture_bs, bs)``)."""
    sizes = sorted(capture_sizes)
    idx = bisect.bisect_left(sizes, n)
    return sizes[idx] if idx < len(sizes) else n


class StepShape:
    """Request/token counts a model state builds one step's metadata with.

    Any cudagraph'd step (FULL or PIECEWISE) runs at the bucket size.
    """

    def __init__(self, input_batch: InputBatch, cudagraph_mode: CUDAGraphMode):
        self.input_batch = input_batch
        self.cudagraph_mode = cudagraph_mode

    @property
    def graphed(self) -> bool:
        return self.cudagraph_mode is not CUDAGraphMode.NONE

    @cached_property
    def num_reqs(self) -> int:
        if self.graphed:
            return self.input_batch.num_reqs_after_padding
        return self.input_batch.num_reqs

    @cached_property
    def num_tokens(self) -> int:
        if self.graphed:
            return self.input_batch.num_tokens_after_padding
        return self.input_batch.num_tokens


class FullGraphShape:
    """Like ``StepShape`` but pads only for a FULL graph replay, which is the
    only mode that replays the captured (padded) shape."""

    def __init__(self, input_batch: InputBatch, cudagraph_mode: CUDAGraphMode):
        self.input_batch = input_batch
        self.full = cudagraph_mode == CUDAGraphMode.FULL

    @cached_property
    def num_reqs(self) -> int:
        batch = self.input_batch
        return batch.num_reqs_after_padding if self.full else batch.num_reqs

    @cached_property
    def num_tokens(self) -> int:
        batch = self.input_batch
        return batch.num_tokens_after_padding if self.full else batch.num_tokens
