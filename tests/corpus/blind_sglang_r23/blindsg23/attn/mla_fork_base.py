"""Fork base for the trtllm/cute MLA decode backends.

Upstream ``TRTLLMMLABackend`` keeps query prep, KV write and the kernel call in
one long ``forward_decode``; the fork splits them so the DCP variants below can
swap only the launch.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel

from blindsg23.common.config import DcpTopology
from blindsg23.common.dcp_lens import launch_trtllm_mla


class ForkTRTLLMMLABase(TRTLLMMLABackend):
    """trtllm-gen MLA with the fork's split query-prep / launch helpers."""

    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
        backend: str = "trtllm-gen",
    ):
        super().__init__(
            model_runner,
            skip_prefill,
            kv_indptr_buf,
            q_indptr_decode_buf,
            backend=backend,
        )
        self.dcp = DcpTopology.current()

    # -- query / cache ---------------------------------------------------
    def _write_kv_and_build_query(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor],
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> torch.Tensor:
        """bf16 path only: write this step's latent KV and build [tokens, h, d]."""
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_pe = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            return concat_mla_absorb_q_general(q_nope, q_pe)
        return q.view(-1, layer.tp_q_head_num, layer.head_dim)

    def _kv_cache_view(self, layer) -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    # -- launch ----------------------------------------------------------
    def _launch_mla(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        return_lse: bool = False,
    ):
        return launch_trtllm_mla(
            self,
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            return_lse=return_lse,
        )

    def _finish_rank_local(
        self,
        raw_out: torch.Tensor,
        lse: torch.Tensor,
        local_lens: torch.Tensor,
        layer,
        bs: int,
        tokens_per_req: int = 1,
    ):
        """Neutralize rows this rank owns nothing of; return (out, lse) for the merge."""
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        q_indptr = torch.arange(
            0,
            (bs + 1) * tokens_per_req,
            tokens_per_req,
            dtype=torch.int32,
            device=output.device,
        )
        fixup_zero_kv_rows(output, lse, local_lens, q_indptr, tokens_per_req)
        return output.flatten(1), lse

    def _dcp_on(self) -> bool:
        return get_parallel().dcp_enabled
