"""Decode-context-parallel helpers for the accelerator team's MLA backends.

Under DCP every rank holds an interleaved share of each request's KV cache.
These helpers derive rank-local lengths and wrap the MLA kernel entry points
so backends share one launch path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dcp import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


class DcpRankInfo(NamedTuple):
    size: int
    rank: int
    enabled: bool


class DcpLens(NamedTuple):
    """Per-request KV lengths: this rank's share and the whole sequence."""

    local: torch.Tensor
    global_: torch.Tensor


@dataclass(frozen=True)
class MlaDims:
    qk_nope_head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int


def dcp_rank_info() -> DcpRankInfo:
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return DcpRankInfo(1, 0, False)
    return DcpRankInfo(parallel.dcp_size, parallel.dcp_rank, True)


def local_kv_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    info = dcp_rank_info()
    if not info.enabled:
        return seq_lens.to(torch.int32)
    return get_dcp_lens(seq_lens, info.size, info.rank).to(torch.int32)


def local_max_seq_len(max_seq_len: int) -> int:
    info = dcp_rank_info()
    if not info.enabled:
        return max_seq_len
    local = max_seq_len // info.size + int(info.rank < max_seq_len % info.size)
    return max(local, 1)


def localize_cpu_lens_(kv_len_arr_cpu: torch.Tensor) -> torch.Tensor:
    update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    return kv_len_arr_cpu


# idiom: trtllm_mla_backend.TRTLLMMLABackend._get_dcp_local_seq_lens, returning both views as a NamedTuple
# expect: clean
def split_dcp_lens(global_lens: torch.Tensor) -> DcpLens:
    global_i32 = global_lens.to(torch.int32)
    info = dcp_rank_info()
    if not info.enabled:
        return DcpLens(global_i32, global_i32)
    local = get_dcp_lens(global_i32, info.size, info.rank).to(torch.int32)
    return DcpLens(local, global_i32)


def local_kv_indices(
    kv_indices: torch.Tensor, translator
) -> torch.Tensor:
    """Keep this rank's widened ids and collapse them to physical rows."""
    widened = filter_dcp_local_kv_indices(kv_indices)
    if translator is None or not dcp_rank_info().enabled:
        return widened
    return translator.translate_dcp_read_ids(widened)


def indptr_from_lens(lens: torch.Tensor) -> torch.Tensor:
    indptr = torch.zeros(lens.numel() + 1, dtype=torch.int32, device=lens.device)
    indptr[1:] = torch.cumsum(lens, dim=0)
    return indptr


# idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel body factored into a module-level launcher (lengths taken as given)
# expect: clean
def launch_mla_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    *,
    dims: MlaDims,
    bmm1_scale: float,
    backend: str = "trtllm-gen",
    return_lse: bool = False,
    multi_ctas_kv_counter_buffer: Optional[torch.Tensor] = None,
):
    extra = {} if backend == "trtllm-gen" else {"backend": backend}
    if multi_ctas_kv_counter_buffer is not None:
        extra["multi_ctas_kv_counter_buffer"] = multi_ctas_kv_counter_buffer
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=return_lse,
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        **extra,
    )


def launch_mla_decode_dcp(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    causal_seqlens_kv_global: torch.Tensor,
    max_seq_len: int,
    *,
    dims: MlaDims,
    bmm1_scale: float,
    cum_seq_lens_q: Optional[torch.Tensor] = None,
    max_q_len: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    info = dcp_rank_info()
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=info.size,
        cp_rank=info.rank,
        causal_seqlens_kv_global=causal_seqlens_kv_global.to(torch.int32),
        cum_seq_lens_q=cum_seq_lens_q,
        max_q_len=max_q_len,
        return_lse=True,
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel for speculative (target-verify / draft-extend) queries, localizing lengths when DCP is on
# expect: SG203
def launch_spec_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    *,
    dims: MlaDims,
    bmm1_scale: float,
):
    """``query`` is dense ``[bs, q_len, heads, head_dim]``."""
    info = dcp_rank_info()
    if info.enabled:
        seq_lens = get_dcp_lens(seq_lens, info.size, info.rank)
        max_seq_len = local_max_seq_len(max_seq_len)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        return_lse=info.enabled,
    )


def plan_mla_wrapper(
    wrapper,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_lens: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    causal: bool,
    sm_scale: float,
    q_data_type: torch.dtype,
    kv_data_type: torch.dtype,
    page_size: int = 1,
) -> None:
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_lens,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
    )
