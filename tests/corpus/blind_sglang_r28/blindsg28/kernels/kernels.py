"""Launch helpers for the MLA decode ports.

``launch_mla_decode`` and ``plan_mla_wrapper`` are deliberately generic: they
launch / plan exactly the lengths they are handed. Callers own the choice of
rank-local vs whole-sequence lengths.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def launch_mla_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    *,
    workspace: torch.Tensor,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    bmm1_scale: float,
    counter_buffer: Optional[torch.Tensor] = None,
    causal_seqlens_kv_global: Optional[torch.Tensor] = None,
    cp_world: int = 1,
    cp_rank: int = 0,
    return_lse: bool = False,
    cum_seq_lens_q: Optional[torch.Tensor] = None,
    max_q_len: Optional[int] = None,
):
    """trtllm-gen by default; the cute-dsl DCP kernel when a global causal
    bound is supplied."""
    extra = {}
    if causal_seqlens_kv_global is not None:
        extra.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=_i32(causal_seqlens_kv_global),
        )
        return_lse = True
    elif counter_buffer is not None:
        extra["multi_ctas_kv_counter_buffer"] = counter_buffer
    if cum_seq_lens_q is not None:
        extra.update(cum_seq_lens_q=cum_seq_lens_q, max_q_len=max_q_len)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace,
        qk_nope_head_dim=qk_nope_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=_i32(seq_lens),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=return_lse,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra,
    )


def plan_mla_wrapper(
    wrapper,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_len_arr: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    q_data_type: torch.dtype,
    kv_data_type: torch.dtype,
    causal: bool = False,
    page_size: int = 1,
) -> None:
    """Positional BatchMLAPagedAttentionWrapper.plan, as SGLang calls it."""
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
    )


# idiom: cutedsl_mla_backend.CuteDslMLABackend._run_decode_kernel, twist: a free helper that takes whole-sequence lengths and localizes them itself, passing the global causal bound
# expect: clean
def launch_dcp_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    global_seq_lens: torch.Tensor,
    max_global_len: int,
    **dims,
):
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return launch_mla_decode(
            query, kv_cache, block_tables, global_seq_lens, max_global_len, **dims
        )
    local = get_dcp_lens(global_seq_lens, parallel.dcp_size, parallel.dcp_rank)
    max_local = max(
        max_global_len // parallel.dcp_size
        + int(parallel.dcp_rank < max_global_len % parallel.dcp_size),
        1,
    )
    return launch_mla_decode(
        query,
        kv_cache,
        block_tables,
        local,
        max_local,
        causal_seqlens_kv_global=global_seq_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
        **dims,
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend (target-verify decode-kernel launch), twist: a verify helper that localizes lengths under DCP but launches the multi-token query without a global causal bound
# expect: SG203
def launch_verify_tokens(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    *,
    num_tokens_per_req: int,
    **dims,
):
    parallel = get_parallel()
    bs = seq_lens.shape[0]
    q = query.view(bs, num_tokens_per_req, -1, query.shape[-1])
    if parallel.dcp_enabled:
        seq_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
        max_seq_len = max_seq_len // parallel.dcp_size + 1
    return launch_mla_decode(
        q,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        return_lse=parallel.dcp_enabled,
        **dims,
    )
