"""Two-batch overlap over trtllm_mla: each half decodes with its child backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple

import torch

from sglang.srt.layers.attention.tbo_backend import TboAttnBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg22.attn.mla_common import build_mla_query, finish_dcp_decode, mla_kv_cache

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


class ForkTboMLABackend(TboAttnBackend):
    primary: TRTLLMMLABackend
    children: List[TRTLLMMLABackend]

    # idiom: sglang/srt/layers/attention/tbo_backend.py TboAttnBackend (children planned per tbo_children half) with a per-child DCP decode
    # expect: SG203
    def forward_decode_halves(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        assert get_parallel().dcp_enabled and forward_batch.tbo_children is not None
        query = build_mla_query(q, q_rope, layer, 1)
        outs: List[torch.Tensor] = []
        lses: List[torch.Tensor] = []
        start = 0
        for child, child_batch in zip(self.children, forward_batch.tbo_children):
            child_bs = child_batch.batch_size
            if child_bs == 0:
                continue
            metadata = child.forward_decode_metadata
            seq_lens = child_batch.seq_lens[:child_bs]
            raw_out, lse = child._run_decode_kernel(
                query=query[start : start + child_bs],
                kv_cache=mla_kv_cache(child, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            out, lse = finish_dcp_decode(
                raw_out, lse, seq_lens, child.q_indptr_decode[: child_bs + 1], layer
            )
            outs.append(out)
            lses.append(lse)
            start += child_bs
        return torch.cat(outs), torch.cat(lses)

    # idiom: sglang/srt/layers/attention/tbo_backend.py TboAttnBackend per-child decode, child lens localized with TRTLLMMLABackend._get_dcp_local_seq_lens
    # expect: clean
    def forward_decode_halves_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        assert get_parallel().dcp_enabled and forward_batch.tbo_children is not None
        query = build_mla_query(q, q_rope, layer, 1)
        outs: List[torch.Tensor] = []
        lses: List[torch.Tensor] = []
        start = 0
        for child, child_batch in zip(self.children, forward_batch.tbo_children):
            child_bs = child_batch.batch_size
            if child_bs == 0:
                continue
            metadata = child.forward_decode_metadata
            seq_lens = child._get_dcp_local_seq_lens(child_batch.seq_lens[:child_bs])
            raw_out, lse = child._run_decode_kernel(
                query=query[start : start + child_bs],
                kv_cache=mla_kv_cache(child, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            out, lse = finish_dcp_decode(
                raw_out, lse, seq_lens, child.q_indptr_decode[: child_bs + 1], layer
            )
            outs.append(out)
            lses.append(lse)
            start += child_bs
        return torch.cat(outs), torch.cat(lses)
