"""Draft-extend / verify launch paths shared by the DCP backends.

These take the backend (a :class:`ForkDcpDecodeBase`) as their first argument
so the spec workers can call them without another backend subclass.
"""

from __future__ import annotations

import torch

from sglang.srt.runtime_context import get_parallel

from blindsg28.kernels import kernels
from blindsg28.kernels.metadata import DcpVerifyMetadata


def _draft_extend_geometry(backend, forward_batch):
    bs = forward_batch.batch_size
    # draft extend runs on post-write lengths (prepare_for_draft_extend)
    global_k = forward_batch.seq_lens[:bs].to(torch.int32)
    if forward_batch.seq_lens_cpu is not None:
        max_global = int(forward_batch.seq_lens_cpu[:bs].max().item())
    else:
        max_global = backend.max_context_len
    block_tables = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_global),
        forward_batch.req_pool_indices,
        global_k,
        global_k.device,
    )
    return bs, global_k, max_global, block_tables


def build_verify_metadata(backend, forward_batch) -> DcpVerifyMetadata:
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_k = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
    if forward_batch.seq_lens_cpu is not None:
        max_global = int(forward_batch.seq_lens_cpu[:bs].max().item()) + ndt
    else:
        max_global = backend.max_context_len + ndt
    block_tables = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_global),
        forward_batch.req_pool_indices,
        global_k,
        global_k.device,
    )
    return DcpVerifyMetadata(
        block_kv_indices=block_tables,
        local_seq_lens=backend._get_dcp_local_seq_lens(global_k),
        causal_bound=global_k,
        max_local_len=backend._get_dcp_local_max_seq_len(max_global),
        draft_token_num=ndt,
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend (draft_extend_v2 direct-view branch), twist: under DCP the kwargs dict is switched to rank-local lengths, but the q_len > 1 draft-extend query gets no global causal bound
# expect: SG203
def run_draft_extend_dcp(backend, q, layer, forward_batch):
    parallel = get_parallel()
    bs, global_k, max_global, block_tables = _draft_extend_geometry(
        backend, forward_batch
    )
    q_len = q.shape[0] // bs
    launch_kwargs = {"seq_lens": global_k, "max_seq_len": max_global}
    if parallel.dcp_enabled:
        launch_kwargs.update(
            seq_lens=backend._get_dcp_local_seq_lens(global_k),
            max_seq_len=backend._get_dcp_local_max_seq_len(max_global),
            return_lse=True,
        )
    query = q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
    return kernels.launch_mla_decode(
        query,
        backend._paged_kv(layer),
        block_tables,
        **launch_kwargs,
        **backend._kernel_dims(layer),
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_extend (draft_extend_v2 varying-length branch), twist: flattened query with cum_seq_lens_q / max_q_len and rank-local lengths under DCP, no global causal bound
# expect: SG203
def run_draft_extend_varlen(backend, q, layer, forward_batch):
    parallel = get_parallel()
    bs, global_k, max_global, block_tables = _draft_extend_geometry(
        backend, forward_batch
    )
    cum_seq_lens_q = torch.nn.functional.pad(
        torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32), (1, 0)
    )
    max_q_len = max(forward_batch.extend_seq_lens_cpu)
    seq_lens = global_k
    max_seq_len = max_global
    if parallel.dcp_enabled:
        seq_lens = backend._get_dcp_local_seq_lens(global_k)
        max_seq_len = backend._get_dcp_local_max_seq_len(max_global)
    return kernels.launch_mla_decode(
        q.view(-1, layer.tp_q_head_num, layer.head_dim),
        backend._paged_kv(layer),
        block_tables,
        seq_lens,
        max_seq_len,
        cum_seq_lens_q=cum_seq_lens_q,
        max_q_len=max_q_len,
        return_lse=parallel.dcp_enabled,
        **backend._kernel_dims(layer),
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (NotImplementedError for q_len > 1 under DCP), twist: the free draft-extend helper refuses multi-token queries under DCP before launching
# expect: clean
def run_draft_extend_refusing(backend, q, layer, forward_batch):
    parallel = get_parallel()
    bs, global_k, max_global, block_tables = _draft_extend_geometry(
        backend, forward_batch
    )
    q_len = q.shape[0] // bs
    if parallel.dcp_enabled and q_len > 1:
        raise NotImplementedError(
            "draft extend with q_len > 1 needs a global causal bound under DCP"
        )
    seq_lens = backend._get_dcp_local_seq_lens(global_k)
    max_seq_len = backend._get_dcp_local_max_seq_len(max_global)
    return kernels.launch_mla_decode(
        q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim),
        backend._paged_kv(layer),
        block_tables,
        seq_lens,
        max_seq_len,
        return_lse=parallel.dcp_enabled,
        **backend._kernel_dims(layer),
    )


# idiom: trtllm_mla_backend.TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (global_seq_lens_k = seq_lens + num_draft_tokens), twist: the bound travels in a DcpVerifyMetadata dataclass built by a helper
# expect: clean
def run_verify_with_bound(backend, q, layer, forward_batch):
    parallel = get_parallel()
    vmd = build_verify_metadata(backend, forward_batch)
    bs = forward_batch.batch_size
    query = q.view(bs, vmd.draft_token_num, layer.tp_q_head_num, layer.head_dim)
    if not parallel.dcp_enabled:
        return kernels.launch_mla_decode(
            query,
            backend._paged_kv(layer),
            vmd.block_kv_indices,
            vmd.causal_bound,
            vmd.max_local_len,
            **backend._kernel_dims(layer),
        )
    return kernels.launch_mla_decode(
        query,
        backend._paged_kv(layer),
        vmd.block_kv_indices,
        vmd.local_seq_lens,
        vmd.max_local_len,
        causal_seqlens_kv_global=vmd.causal_bound,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        **backend._kernel_dims(layer),
    )
