# Padding / DCP helpers shared by the fork's speculators.
import bisect
from collections.abc import Sequence

import numpy as np
import torch

from vllm.utils.math_utils import cdiv, round_up
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


def ceil_align(x: int, y: int) -> int:
    return cdiv(x, y) * y


def next_capture_size(capture_sizes: Sequence[int], n: int) -> int:
    idx = bisect.bisect_left(capture_sizes, n)
    if idx >= len(capture_sizes):
        return n
    return capture_sizes[idx]


def dp_max_tokens(num_tokens_across_dp: torch.Tensor | None, local: int) -> int:
    if num_tokens_across_dp is None:
        return local
    return int(num_tokens_across_dp.max().item())


def pad_query_start_loc(qsl_np: np.ndarray, num_reqs: int, padded: int) -> np.ndarray:
    """Return a copy of qsl whose tail absorbs the padding tokens."""
    out = qsl_np[: num_reqs + 1].copy()
    out[num_reqs] = padded
    return out


def uniform_qsl(arange_np: np.ndarray, num_reqs: int, q: int) -> np.ndarray:
    return arange_np[: num_reqs + 1] * q


def refresh_dcp_lens(spec, num_reqs: int) -> torch.Tensor | None:
    if spec.dcp_size <= 1:
        return None
    return prepare_dcp_local_seq_lens(
        spec.input_buffers.dcp_local_seq_lens,
        spec.input_buffers.seq_lens,
        num_reqs,
        spec.dcp_size,
        spec.block_tables.cp_rank,
        spec.block_tables.cp_interleave,
    )


def direct_build(spec, num_reqs: int, num_tokens: int, qsl_cpu: torch.Tensor):
    """Build draft attention metadata from the speculator's buffers directly."""
    return build_attn_metadata(
        attn_groups=spec.attn_groups,
        num_reqs=num_reqs,
        num_tokens=num_tokens,
        query_start_loc_gpu=spec.input_buffers.query_start_loc[: num_reqs + 1],
        query_start_loc_cpu=qsl_cpu,
        max_query_len=int((qsl_cpu[1:] - qsl_cpu[:-1]).max()),
        seq_lens=spec.input_buffers.seq_lens[:num_reqs],
        max_seq_len=spec.max_model_len,
        block_tables=[x[:num_reqs] for x in spec.block_tables.input_block_tables],
        slot_mappings=spec.block_tables.slot_mappings[:, :num_tokens],
        kv_cache_config=spec.kv_cache_config,
    )


class DcpLenCache:
    """Keeps the rank-local lengths computed for a given step."""

    def __init__(self) -> None:
        self.by_step: dict[int, torch.Tensor] = {}
        self.last: torch.Tensor | None = None

    def put(self, step: int, lens: torch.Tensor | None) -> None:
        if lens is not None:
            self.by_step[step] = lens
            self.last = lens

    def get(self, step: int) -> torch.Tensor | None:
        return self.by_step.get(step, self.last)


__all__ = [
    "ceil_align",
    "next_capture_size",
    "dp_max_tokens",
    "pad_query_start_loc",
    "uniform_qsl",
    "refresh_dcp_lens",
    "direct_build",
    "DcpLenCache",
    "round_up",
]
