"""Launch helpers around FlashInfer's MLA decode entry points."""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.utils import is_flashinfer_available

from blindsg27.mla.metadata import DcpLaunchArgs, MLAKernelDims

if is_flashinfer_available():
    import flashinfer


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def launch_trtllm_mla_decode(
    backend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    layer,
    return_lse: bool = False,
    dcp: Optional[DcpLaunchArgs] = None,
):
    """``trtllm_batch_decode_with_kv_cache_mla`` with the backend's workspace.

    With ``dcp`` the cute-dsl DCP kernel runs (rank-local ``seq_lens`` plus the
    global causal bound); without it, whatever ``backend.backend`` names.
    """
    dims = MLAKernelDims.of(backend)
    kwargs = {}
    kernel_backend = backend.backend
    if dcp is not None:
        if dcp.causal_seqlens_kv_global is None:
            raise ValueError("DCP MLA decode needs causal_seqlens_kv_global")
        kernel_backend = "cute-dsl"
        return_lse = True
        kwargs.update(
            enable_dcp=True,
            cp_world=dcp.cp_world,
            cp_rank=dcp.cp_rank,
            causal_seqlens_kv_global=_i32(dcp.causal_seqlens_kv_global),
        )
    if kernel_backend == "trtllm-gen":
        kwargs["multi_ctas_kv_counter_buffer"] = backend._multi_ctas_kv_counter_buffer
    else:
        kwargs["backend"] = kernel_backend
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=_i32(seq_lens),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        return_lse=return_lse,
        **kwargs,
    )


def local_lens(seq_lens: torch.Tensor, interleave_size: int = 1) -> torch.Tensor:
    """This rank's share of ``seq_lens`` (identity when DCP is off)."""
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return seq_lens
    return get_dcp_lens(
        seq_lens, parallel.dcp_size, parallel.dcp_rank, interleave_size=interleave_size
    ).to(torch.int32)


def resolve_launch_lens(metadata, forward_batch, bs: int):
    """(rank-local, global) lengths for a decode launch."""
    if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
        return metadata.seq_lens_k[:bs], metadata.global_seq_lens_k[:bs]
    global_lens = forward_batch.seq_lens[:bs]
    return local_lens(global_lens), global_lens


def decode_lens_for(metadata, forward_batch, bs: int) -> torch.Tensor:
    """Lengths for a decode launch: the hoisted buffer when there is one."""
    if metadata.seq_lens_k is not None:
        return metadata.seq_lens_k[:bs]
    return _i32(forward_batch.seq_lens[:bs])


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
    causal: bool,
    sm_scale: float,
    q_data_type: torch.dtype,
    kv_data_type: torch.dtype,
) -> None:
    """Legacy flat-metadata ``BatchMLAPagedAttentionWrapper.plan`` (page size 1)."""
    wrapper.plan(
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        kv_lora_rank,
        qk_rope_head_dim,
        1,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
    )


# idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode DCP launch, from a metadata record (global_seq_lens_k passed as seq_lens)
# expect: SG203
def dcp_decode_from_metadata(backend, query, kv_cache, metadata, layer, bs: int):
    if not get_parallel().dcp_enabled:
        return launch_trtllm_mla_decode(
            backend,
            query,
            kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
    kv_lens = metadata.global_seq_lens_k[:bs]
    return launch_trtllm_mla_decode(
        backend,
        query,
        kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=kv_lens,
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
        dcp=DcpLaunchArgs.current(causal_seqlens_kv_global=kv_lens),
    )


# idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode DCP launch, from a metadata record (rank-local seq_lens_k + global causal bound)
# expect: clean
def dcp_decode_local(backend, query, kv_cache, metadata, layer, bs: int):
    dcp = DcpLaunchArgs.current(
        causal_seqlens_kv_global=(
            metadata.global_seq_lens_k[:bs]
            if metadata.global_seq_lens_k is not None
            else None
        )
    )
    return launch_trtllm_mla_decode(
        backend,
        query,
        kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k[:bs],
        max_seq_len=metadata.max_seq_len_k,
        layer=layer,
        dcp=dcp,
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend target-verify launch under DCP (rank-local lens, multi-token query, no global causal bound)
# expect: SG203
def launch_spec_decode(backend, query, kv_cache, block_tables, local_seq_lens, max_seq_len, layer):
    # query: [bs, q_len, heads, head_dim]
    if get_parallel().dcp_enabled:
        return launch_trtllm_mla_decode(
            backend,
            query,
            kv_cache,
            block_tables=block_tables,
            seq_lens=local_seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
    return launch_trtllm_mla_decode(
        backend,
        query,
        kv_cache,
        block_tables=block_tables,
        seq_lens=local_seq_lens,
        max_seq_len=max_seq_len,
        layer=layer,
    )


# idiom: hardware_backend/npu/attention/dsa_dcp.forward_dcp_sparse_attention + dcp.layout.get_dcp_chain_spec_lens (chain verify as single-token rows, per-row local frontier)
# expect: clean
def launch_spec_decode_flattened(backend, query, kv_cache, block_tables, total_kv_lens, layer):
    bs, q_len, heads, head_dim = query.shape
    parallel = get_parallel()
    if not parallel.dcp_enabled:
        return launch_trtllm_mla_decode(
            backend,
            query,
            kv_cache,
            block_tables=block_tables,
            seq_lens=total_kv_lens,
            max_seq_len=backend.max_context_len + q_len,
            layer=layer,
        )
    if (get_spec().speculative_eagle_topk or 1) > 1:
        raise NotImplementedError("flattened DCP verify supports chain drafts (topk=1) only")
    # Row (i, j) is query token j of request i, a one-token decode whose
    # rank-local frontier counts the tokens it may attend on this rank.
    row_lens = get_dcp_chain_spec_lens(
        total_kv_lens, q_len, parallel.dcp_size, parallel.dcp_rank
    )
    rows = query.reshape(bs * q_len, 1, heads, head_dim)
    row_tables = block_tables[:bs].repeat_interleave(q_len, dim=0)
    out, lse = launch_trtllm_mla_decode(
        backend,
        rows,
        kv_cache,
        block_tables=row_tables,
        seq_lens=row_lens,
        max_seq_len=backend._get_dcp_local_max_seq_len(backend.max_context_len + q_len),
        layer=layer,
        return_lse=True,
    )
    return out, lse, row_lens
