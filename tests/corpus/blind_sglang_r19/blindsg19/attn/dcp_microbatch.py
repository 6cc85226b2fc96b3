"""Two-batch-overlap decode under DCP: each TBO child is decoded with its own
launch so the DCP all-gather of child i+1 overlaps the kernel of child i."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Sequence, Tuple

import torch

from blindsg19.common.dcp_lens import rank_local_lens
from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class MicroBatchDCPDecode:
    def __init__(self, backends: Sequence[TRTLLMMLABackend]):
        # One backend instance (and metadata) per TBO child.
        self.backends = list(backends)

    # expect: SG203
    def run(
        self,
        children: List["ForwardBatch"],
        queries: List[torch.Tensor],
        kv_cache: torch.Tensor,
        layer: "RadixAttention",
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        dcp = get_parallel().dcp_enabled
        outputs = []
        for backend, child, query in zip(self.backends, children, queries):
            metadata = child.decode_trtllm_mla_metadata
            bs = child.batch_size
            child_lens = child.seq_lens[:bs].to(torch.int32)
            result = backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=child_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=dcp,
            )
            if dcp:
                raw_out, lse = result
                out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
                lse = lse.view(-1, layer.tp_q_head_num)
                fixup_zero_kv_rows(
                    out, lse, child_lens, backend.q_indptr_decode[: bs + 1], 1
                )
                outputs.append((out.flatten(1), lse))
            else:
                outputs.append((result.flatten(1), None))
        return outputs

    # expect: clean
    def run_local(
        self,
        children: List["ForwardBatch"],
        queries: List[torch.Tensor],
        kv_cache: torch.Tensor,
        layer: "RadixAttention",
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        dcp = get_parallel().dcp_enabled
        outputs = []
        for backend, child, query in zip(self.backends, children, queries):
            metadata = child.decode_trtllm_mla_metadata
            bs = child.batch_size
            child_lens = rank_local_lens(child.seq_lens[:bs])
            result = backend._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=child_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=dcp,
            )
            if dcp:
                raw_out, lse = result
                out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
                lse = lse.view(-1, layer.tp_q_head_num)
                fixup_zero_kv_rows(
                    out, lse, child_lens, backend.q_indptr_decode[: bs + 1], 1
                )
                outputs.append((out.flatten(1), lse))
            else:
                outputs.append((result.flatten(1), None))
        return outputs
