# SPDX-License-Identifier: Apache-2.0
"""Shape helpers shared by the draft runners in this package."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from vllm.utils.math_utils import round_up
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor


@dataclass
class RequestPaddingPolicy:
    """Rounds request counts to the granularity the draft graphs use."""

    alignment: int = 8
    capacity: int | None = None

    def pad(self, num_reqs: int) -> int:
        padded = round_up(num_reqs, self.alignment)
        if self.capacity is not None:
            padded = min(padded, self.capacity)
        return padded

    def passthrough(self, num_reqs: int) -> int:
        return num_reqs


@dataclass
class DraftGraphState:
    """What the last dispatch of a draft step agreed on."""

    desc: BatchExecutionDescriptor | None = None
    num_reqs: int = 0
    num_reqs_padded: int = 0
    num_tokens_across_dp: torch.Tensor | None = None
    history: list[BatchExecutionDescriptor] = field(default_factory=list)

    def record(self, desc: BatchExecutionDescriptor, num_reqs: int) -> None:
        self.desc = desc
        self.num_reqs = num_reqs
        self.num_reqs_padded = desc.num_reqs or num_reqs
        self.history.append(desc)


def _descriptor_reqs(desc: BatchExecutionDescriptor, fallback: int) -> int:
    return desc.num_reqs or fallback


def graph_request_count(desc: BatchExecutionDescriptor, num_reqs: int) -> int:
    return _descriptor_reqs(desc, num_reqs)


def batch_request_count(query_start_loc_np: np.ndarray) -> int:
    return len(query_start_loc_np) - 1


def pad_to_bucket(raw_size: int, buckets: Sequence[int]) -> int:
    ordered = sorted(buckets)
    idx = bisect.bisect_left(ordered, raw_size)
    if idx == len(ordered):
        return raw_size
    return ordered[idx]


def iter_step_request_counts(
    desc: BatchExecutionDescriptor, num_reqs: int, num_steps: int
) -> Iterator[tuple[int, int]]:
    for step in range(1, num_steps):
        yield step, _descriptor_reqs(desc, num_reqs)


def iter_step_real_counts(num_reqs: int, num_steps: int) -> Iterator[tuple[int, int]]:
    for step in range(1, num_steps):
        yield step, num_reqs


def iter_step_dcp_lens(
    dcp_local_seq_lens: torch.Tensor | None, num_steps: int
) -> Iterator[tuple[int, torch.Tensor | None]]:
    for step in range(1, num_steps):
        yield step, dcp_local_seq_lens
