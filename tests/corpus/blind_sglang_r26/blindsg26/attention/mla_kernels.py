"""Direct FlashInfer MLA launches used by the fork's backends.

SGLang routes every MLA decode through ``TRTLLMMLABackend._run_decode_kernel``;
the fork calls FlashInfer directly in a few hot paths to pass its own
counter buffer / output buffer.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg26.common.dcp import localize_lens

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


def launch_trtllm_mla_decode(
    backend,
    *,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer,
    return_lse: bool = False,
):
    """trtllm-gen MLA decode (no DCP arguments: the kernel has no DCP mask)."""
    bmm1_scale = backend._compute_decode_bmm1_scale(layer)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        backend="trtllm-gen",
        return_lse=return_lse,
        multi_ctas_kv_counter_buffer=backend._multi_ctas_kv_counter_buffer,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


def launch_cute_dsl_mla_dcp(
    backend,
    *,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    local_seq_lens: torch.Tensor,
    global_seq_lens: torch.Tensor,
    max_seq_len: int,
    layer,
):
    """cute-dsl monolithic MLA decode with cyclic DCP metadata; returns (out, lse)."""
    parallel = get_parallel()
    bmm1_scale = backend._compute_decode_bmm1_scale(layer)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=local_seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=global_seq_lens.to(torch.int32).contiguous(),
        return_lse=True,
    )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify branch, dense [bs, draft_token_num] query)
# expect: SG203
def run_verify_chain(backend, q, kv_cache, metadata, layer, forward_batch):
    """Dense target-verify launch for chain (topk == 1) speculation."""
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    verify_lens = forward_batch.seq_lens[:bs] + draft_token_num
    if get_parallel().dcp_enabled:
        # Each rank walks its own cyclic slice of the KV cache.
        kv_lens = localize_lens(verify_lens)
        max_seq_len = metadata.max_seq_len_k
    else:
        kv_lens = verify_lens.to(torch.int32)
        max_seq_len = metadata.max_seq_len_k + draft_token_num
    raw_out, lse = launch_trtllm_mla_decode(
        backend,
        query=q,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=kv_lens,
        max_seq_len=max_seq_len,
        layer=layer,
        return_lse=True,
    )
    output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
    return output.flatten(1), lse


# idiom: sglang/srt/hardware_backend/npu/attention/ascend_backend.py _get_kv_lens_and_block_tables (get_dcp_chain_spec_lens) ported to TRTLLMMLABackend verify
# expect: clean
def run_verify_chain_flattened(backend, q, kv_cache, metadata, layer, forward_batch):
    """Chain verify as bs * draft_token_num single-token decode rows.

    Each verify token becomes its own decode row whose rank-local frontier is
    computed by get_dcp_chain_spec_lens, so no per-token causal bound is needed.
    """
    parallel = get_parallel()
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    total_kv_lens = forward_batch.seq_lens[:bs] + draft_token_num
    if parallel.dcp_enabled:
        row_lens = get_dcp_chain_spec_lens(
            total_kv_lens, draft_token_num, parallel.dcp_size, parallel.dcp_rank
        )
    else:
        steps = torch.arange(
            1, draft_token_num + 1, dtype=torch.int32, device=total_kv_lens.device
        )
        row_lens = (
            total_kv_lens.int().unsqueeze(1) - draft_token_num + steps
        ).reshape(-1)
    rows = bs * draft_token_num
    query = q.view(rows, 1, layer.tp_q_head_num, layer.head_dim)
    block_tables = metadata.block_kv_indices[:bs].repeat_interleave(
        draft_token_num, dim=0
    )
    raw_out, lse = launch_trtllm_mla_decode(
        backend,
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=row_lens,
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
        return_lse=True,
    )
    output = raw_out.view(rows, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(rows, layer.tp_q_head_num)
    row_indptr = torch.arange(rows + 1, dtype=torch.int32, device=query.device)
    fixup_zero_kv_rows(output, lse, row_lens, row_indptr, 1)
    return output.flatten(1), lse
