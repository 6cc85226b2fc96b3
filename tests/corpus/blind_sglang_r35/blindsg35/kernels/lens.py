"""Per-rank length helpers layered over ``sglang.srt.layers.dcp.layout``
(unlabelled)."""

from __future__ import annotations

import dataclasses

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens

from blindsg35.kernels.dcp_view import DcpView


def rank_local_lens(lens: torch.Tensor, view: DcpView) -> torch.Tensor:
    """This rank's share of each length (token-interleaved layout)."""
    if not view.enabled:
        return lens.to(torch.int32)
    return get_dcp_lens(lens, view.size, view.rank).to(torch.int32)


def rank_local_max(max_len: int, view: DcpView) -> int:
    if not view.enabled:
        return max_len
    local = max_len // view.size + int(view.rank < max_len % view.size)
    return max(local, 1)


def verify_kv_lens(seq_lens: torch.Tensor, num_draft_tokens: int) -> torch.Tensor:
    return (seq_lens + num_draft_tokens).to(torch.int32)


def draft_extend_kv_lens(
    seq_lens: torch.Tensor, extend_seq_lens: torch.Tensor, max_seq_len_q: int
) -> torch.Tensor:
    # see NOTE(draft_extend seq_len handling) in trtllm_mla_backend
    return (seq_lens - extend_seq_lens + max_seq_len_q).to(torch.int32)


@dataclasses.dataclass
class DcpKvLens:
    kv: torch.Tensor  # whole (global) per-request KV length, int32
    kv_local: torch.Tensor  # this rank's share of it, int32
    max_local: int


def split_kv_lens(global_lens: torch.Tensor, view: DcpView, max_global: int) -> DcpKvLens:
    global_lens = global_lens.to(torch.int32)
    return DcpKvLens(
        kv=global_lens,
        kv_local=rank_local_lens(global_lens, view),
        max_local=rank_local_max(max_global, view),
    )
