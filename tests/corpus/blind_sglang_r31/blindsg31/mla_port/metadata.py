"""Per-layer MLA decode metadata objects."""

from __future__ import annotations

from typing import Optional

import torch

from blindsg31.mla_port.lengths import LensView, RankLens, local_max_len


class LayerMLAMeta:
    """What one MLA layer's decode launch reads."""

    def __init__(
        self,
        block_kv_indices: torch.Tensor,
        seq_lens_k: torch.Tensor,
        max_seq_len_k: int,
        global_seq_lens_k: Optional[torch.Tensor] = None,
        q_len: int = 1,
    ):
        self.block_kv_indices = block_kv_indices
        self._seq_lens_k = seq_lens_k
        self._global_seq_lens_k = global_seq_lens_k
        self.max_seq_len_k = max_seq_len_k
        self.q_len = q_len

    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self._seq_lens_k

    @property
    def causal_bound(self) -> Optional[torch.Tensor]:
        return self._global_seq_lens_k

    @property
    def is_multi_token(self) -> bool:
        return self.q_len > 1


def build_layer_meta_local(
    block_kv_indices: torch.Tensor, seq_lens: torch.Tensor, max_seq_len: int, q_len: int = 1
) -> LayerMLAMeta:
    lens = RankLens.from_global(seq_lens)
    return LayerMLAMeta(
        block_kv_indices,
        seq_lens_k=lens.kernel,
        max_seq_len_k=local_max_len(max_seq_len),
        global_seq_lens_k=lens.causal,
        q_len=q_len,
    )


def build_layer_meta_raw(
    block_kv_indices: torch.Tensor, seq_lens: torch.Tensor, max_seq_len: int, q_len: int = 1
) -> LayerMLAMeta:
    view = LensView(seq_lens)
    return LayerMLAMeta(
        block_kv_indices,
        seq_lens_k=view.kernel_lens,
        max_seq_len_k=max_seq_len,
        q_len=q_len,
    )
