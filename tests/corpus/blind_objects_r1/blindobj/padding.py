"""Padding policies and small count helpers shared by the corpus speculators.

Nothing in this module is labelled; it exists so that padded counts travel
through config objects, generators and plain helper functions before they
reach a metadata build in another module.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.utils.math_utils import round_up
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor


@dataclass(frozen=True)
class DraftPaddingPolicy:
    """Config object that knows how the draft pads its batches.

    Shape taken from SGLang's ``BaseCudaGraphRunner._pad_to_bucket`` (bucket
    padding), ``ForwardBatch.prepare_mlp_sync_batch`` (``ceil_align`` to the
    attention-TP size) and ``DpPaddingMode`` MAX_LEN (pad to the largest
    rank's count).
    """

    capture_sizes: tuple[int, ...]
    attn_tp_size: int = 1
    max_num_tokens: int = 8192

    @classmethod
    def from_vllm_config(cls, vllm_config: VllmConfig) -> "DraftPaddingPolicy":
        sizes = vllm_config.compilation_config.cudagraph_capture_sizes or [1]
        return cls(
            capture_sizes=tuple(sorted(sizes)),
            attn_tp_size=vllm_config.parallel_config.tensor_parallel_size,
            max_num_tokens=vllm_config.scheduler_config.max_num_batched_tokens,
        )

    def pad_to_capture(self, num_tokens: int) -> int:
        # Smallest captured size >= num_tokens (falls back to the raw count).
        index = bisect.bisect_left(self.capture_sizes, num_tokens)
        if index == len(self.capture_sizes):
            return num_tokens
        return self.capture_sizes[index]

    def align_for_attn_tp(self, num_tokens: int) -> int:
        return round_up(num_tokens, self.attn_tp_size)

    def pad_across_dp(self, num_tokens: int, counts: Sequence[int]) -> int:
        # MAX_LEN: every rank runs the largest rank's count.
        return max(num_tokens, max(counts))

    def real_or_padded(self, desc: BatchExecutionDescriptor, num_tokens: int) -> int:
        # The padded count only belongs to a FULL replay of this descriptor.
        if desc.cg_mode == CUDAGraphMode.FULL:
            return desc.num_tokens
        return num_tokens


def padded_step_counts(
    desc: BatchExecutionDescriptor, num_steps: int
) -> Iterator[tuple[int, int]]:
    """Yield (step, token count) for each draft decode step: always padded."""
    for step in range(1, num_steps):
        yield step, desc.num_tokens


def attn_step_counts(
    desc: BatchExecutionDescriptor, num_reqs: int, num_steps: int
) -> Iterator[tuple[int, int]]:
    """Yield (step, token count) for each draft decode step: padded only for
    a FULL replay of ``desc``, else the real count (one token per request)."""
    for step in range(1, num_steps):
        if desc.cg_mode == CUDAGraphMode.FULL:
            yield step, desc.num_tokens
        else:
            yield step, num_reqs


def uniform_qsl(arange_np: np.ndarray, num_reqs: int, num_query_per_req: int) -> np.ndarray:
    return arange_np[: num_reqs + 1] * num_query_per_req


def qsl_with_padding_request(
    arange_np: np.ndarray, num_reqs: int, num_query_per_req: int, total: int
) -> np.ndarray:
    """query_start_loc for a uniform batch plus one trailing dummy request
    that ends at ``total`` (the padding rows are attributed to it, as SGLang's
    graph runner attributes padded rows to dummy requests).

    ``DraftModelSpeculator._build_attn_metadata`` only copies the first
    ``num_reqs + 1`` entries, but takes ``int(query_start_loc_np[-1])`` as the
    token count for non-FULL batches, so ``total`` becomes that count.
    """
    qsl = arange_np[: num_reqs + 1] * num_query_per_req
    return np.append(qsl, np.int32(total))
