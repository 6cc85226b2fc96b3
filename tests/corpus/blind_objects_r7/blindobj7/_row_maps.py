# SPDX-License-Identifier: Apache-2.0
"""Row maps used to flatten non-causal decode blocks into single-token rows."""

from dataclasses import dataclass

import torch


def decode_row_req(
    query_start_loc: torch.Tensor, num_rows: int, num_reqs: int
) -> torch.Tensor:
    """Request index of every flattened decode row (ragged-safe)."""
    rows = torch.arange(num_rows, device=query_start_loc.device, dtype=query_start_loc.dtype)
    return torch.searchsorted(query_start_loc[1:], rows, right=True).clamp_(
        max=num_reqs - 1
    )


@dataclass
class DecodeRowMap:
    """One row map, applied alike to every per-request decode tensor."""

    row_req: torch.Tensor

    @classmethod
    def for_rows(
        cls, query_start_loc: torch.Tensor, num_rows: int, num_reqs: int
    ) -> "DecodeRowMap":
        return cls(decode_row_req(query_start_loc, num_rows, num_reqs))

    @property
    def num_rows(self) -> int:
        return self.row_req.shape[0]

    def gather(self, per_request: torch.Tensor) -> torch.Tensor:
        return per_request[self.row_req]
