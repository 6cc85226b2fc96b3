# SPDX-License-Identifier: Apache-2.0
"""Per-row expansion of MLA decode metadata for flattened query blocks."""

from __future__ import annotations

import torch


def uniform_query_len(num_decode_tokens: int, num_decodes: int) -> int:
    q_len, remainder = divmod(num_decode_tokens, max(num_decodes, 1))
    assert remainder == 0, (num_decode_tokens, num_decodes)
    return q_len


def expand_per_row(
    block_table: torch.Tensor, seq_lens: torch.Tensor, q_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        block_table.repeat_interleave(q_len, dim=0),
        seq_lens.repeat_interleave(q_len),
    )


def expand_all_per_row(
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    global_seq_lens: torch.Tensor | None,
    q_len: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    block_table, seq_lens = expand_per_row(block_table, seq_lens, q_len)
    if global_seq_lens is not None:
        global_seq_lens = global_seq_lens.repeat_interleave(q_len)
    return block_table, seq_lens, global_seq_lens


def ragged_row_map(query_start_loc: torch.Tensor, num_decodes: int) -> torch.Tensor:
    query_lens = query_start_loc[1 : num_decodes + 1] - query_start_loc[:num_decodes]
    return torch.repeat_interleave(
        torch.arange(num_decodes, device=query_start_loc.device), query_lens
    )
