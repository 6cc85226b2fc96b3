"""Per-forward metadata containers of the DCP port."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

import torch


@dataclass
class Fa3DcpMetadata:
    """FA3-style MLA decode metadata; the launch reads these fields as-is."""

    cache_seqlens_int32: Optional[torch.Tensor] = None  # rank-local KV lens
    cache_seqlens_global: Optional[torch.Tensor] = None
    page_table: Optional[torch.Tensor] = None  # rank-local page table
    cu_seqlens_q: Optional[torch.Tensor] = None
    cu_seqlens_k: Optional[torch.Tensor] = None
    max_seq_len_q: int = 1
    max_seq_len_k: int = 0


@dataclass
class DcpGraphLens:
    """Capture-stable length buffers for one captured batch size."""

    buffers: Dict[str, torch.Tensor] = field(default_factory=dict)
