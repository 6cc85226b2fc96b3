"""Target-verify / draft-extend MLA launchers for decode context parallel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class DCPChainVerifyLauncher:
    """Chain (topk == 1) verify under DCP as bs * T single-token decodes: each
    draft token becomes its own row whose rank-local KV frontier is that
    token's causal limit on this rank."""

    def __init__(self, backend: TRTLLMMLABackend):
        self.backend = backend

    # expect: clean
    def __call__(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        forward_batch: "ForwardBatch",
        layer: "RadixAttention",
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        backend = self.backend
        metadata = forward_batch.decode_trtllm_mla_metadata
        parallel = get_parallel()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        total_kv_lens = forward_batch.seq_lens[:bs] + ndt
        if parallel.dcp_enabled:
            row_lens = get_dcp_chain_spec_lens(
                total_kv_lens, ndt, parallel.dcp_size, parallel.dcp_rank
            )
        else:
            steps = torch.arange(1, ndt + 1, device=total_kv_lens.device)
            row_lens = (total_kv_lens.unsqueeze(1) - ndt + steps).reshape(-1).int()
        rows = query.view(bs * ndt, 1, layer.tp_q_head_num, layer.head_dim)
        block_tables = metadata.block_kv_indices[:bs].repeat_interleave(ndt, dim=0)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=rows,
            kv_cache=kv_cache,
            workspace_buffer=backend.workspace_buffer,
            qk_nope_head_dim=backend.qk_nope_head_dim,
            kv_lora_rank=backend.kv_lora_rank,
            qk_rope_head_dim=backend.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=backend._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        out = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * ndt, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            out,
            lse,
            row_lens,
            torch.arange(bs * ndt + 1, dtype=torch.int32, device=out.device),
            1,
        )
        return out.flatten(1), lse


class DCPVerifyLauncher:
    """Dense [bs, T] verify launch shared by the fork's trtllm_mla variants."""

    def __init__(self, backend: TRTLLMMLABackend):
        self.backend = backend

    # expect: SG203
    def __call__(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        forward_batch: "ForwardBatch",
        layer: "RadixAttention",
    ):
        backend = self.backend
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        dcp = get_parallel().dcp_enabled
        # seq_lens_k is rank-local under DCP (see init_forward_metadata).
        result = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=backend.workspace_buffer,
            qk_nope_head_dim=backend.qk_nope_head_dim,
            kv_lora_rank=backend.kv_lora_rank,
            qk_rope_head_dim=backend.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=backend._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        if not dcp:
            return result.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = result
        out = raw_out.view(bs * ndt, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * ndt, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            out, lse, metadata.seq_lens_k, backend._dense_q_indptr(bs, ndt), ndt
        )
        return out.flatten(1), lse


# expect: SG203
def run_draft_extend_dcp(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: "ForwardBatch",
    layer: "RadixAttention",
):
    """Varlen draft-extend (compact [total_q, H, D] query) under DCP."""
    metadata = forward_batch.decode_trtllm_mla_metadata
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        raise RuntimeError("run_draft_extend_dcp called without DCP")
    seq_lens_q = forward_batch.extend_seq_lens
    cu_seqlens_q = torch.nn.functional.pad(
        torch.cumsum(seq_lens_q, dim=0, dtype=torch.int32), (1, 0)
    )
    max_q_len = max(forward_batch.extend_seq_lens_cpu)
    raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query.view(-1, layer.tp_q_head_num, layer.head_dim),
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k,
        max_seq_len=metadata.max_seq_len_k + max_q_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        cum_seq_lens_q=cu_seqlens_q,
        max_q_len=max_q_len,
        return_lse=True,
    )
    out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(out, lse, metadata.seq_lens_k, cu_seqlens_q, max_q_len)
    return out.flatten(1), lse
