# SPDX-License-Identifier: Apache-2.0
"""Token-count helpers shared by the DP-aware drafters.

These return counts that the CUDA-graph dispatcher or the DP all-reduce agreed
on, i.e. counts that may include padding no request owns.
"""

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import DPSyncState


def pad_to_captured_size(num_tokens: int, capture_sizes: Sequence[int]) -> int:
    """Smallest captured size >= num_tokens (SGLang's ``_pad_to_bucket``)."""
    sizes = sorted(capture_sizes)
    if not sizes or num_tokens > sizes[-1]:
        return num_tokens
    return sizes[bisect.bisect_left(sizes, num_tokens)]


def dp_padded_shape(
    batch_sync: DPSyncState | None,
    num_tokens: int,
    num_query_per_req: int,
) -> tuple[int, int]:
    """(tokens, requests) every DP rank runs for a uniform query block."""
    if batch_sync is None:
        return num_tokens, num_tokens // num_query_per_req
    max_tokens = int(batch_sync.num_tokens_across_dp.max())
    return max_tokens, max_tokens // num_query_per_req


def iter_step_token_counts(
    batch_desc: BatchExecutionDescriptor, num_speculative_steps: int
) -> Iterator[tuple[int, int]]:
    """Yield (draft step, tokens the step runs) for draft steps 1..N-1."""
    for step in range(1, num_speculative_steps):
        yield step, batch_desc.num_tokens


def iter_step_request_counts(
    num_reqs: int, num_speculative_steps: int
) -> Iterator[tuple[int, int]]:
    """Yield (draft step, scheduled requests) for draft steps 1..N-1."""
    for step in range(1, num_speculative_steps):
        yield step, num_reqs


@dataclass
class DraftGraphState:
    """What the query-graph dispatch decided for the current draft step."""

    batch_desc: BatchExecutionDescriptor
    num_query_per_req: int

    @property
    def is_full(self) -> bool:
        return self.batch_desc.cg_mode == CUDAGraphMode.FULL

    @property
    def padded_num_reqs(self) -> int:
        return self.batch_desc.num_tokens // self.num_query_per_req
