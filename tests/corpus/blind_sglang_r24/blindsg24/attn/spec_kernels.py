"""Free-standing MLA decode launches used by the fork's MTP / verify code
(called with a TRTLLMMLABackend-family backend for workspace and dims)."""

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def _launch_kwargs(backend: TRTLLMMLABackend, layer: RadixAttention) -> dict:
    return dict(
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target verify: q.view(bs, draft_token_num, ...)) with DCP lengths localized but no causal bound
# expect: SG203
def launch_mla_verify(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: RadixAttention,
    max_seq_len: int,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    kv_lens = forward_batch.seq_lens[:bs] + draft_token_num
    if parallel.dcp_enabled:
        kv_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=kv_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        return_lse=parallel.dcp_enabled,
        **_launch_kwargs(backend, layer),
    )


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (enable_dcp + causal_seqlens_kv_global) for a target-verify query
# expect: clean
def launch_mla_verify_bounded(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: RadixAttention,
    max_seq_len: int,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    draft_token_num = forward_batch.spec_info.draft_token_num
    query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
    if not parallel.dcp_enabled:
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=global_kv_lens,
            max_seq_len=max_seq_len,
            **_launch_kwargs(backend, layer),
        )
    local_kv_lens = get_dcp_lens(
        global_kv_lens, parallel.dcp_size, parallel.dcp_rank
    ).to(torch.int32)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=local_kv_lens,
        max_seq_len=max_seq_len,
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        causal_seqlens_kv_global=global_kv_lens,
        return_lse=True,
        **_launch_kwargs(backend, layer),
    )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_max_seq_len + _run_decode_kernel (single-token decode)
# expect: SG203
def launch_mla_decode_step(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: RadixAttention,
    max_seq_len: int,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    if parallel.dcp_enabled:
        # Each rank walks only its share: shrink the scheduling bound.
        max_seq_len = backend._get_dcp_local_max_seq_len(max_seq_len)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        return_lse=parallel.dcp_enabled,
        **_launch_kwargs(backend, layer),
    )


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens + _get_dcp_local_max_seq_len (single-token decode)
# expect: clean
def launch_mla_decode_step_local(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: RadixAttention,
    max_seq_len: int,
):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    if parallel.dcp_enabled:
        seq_lens = backend._get_dcp_local_seq_lens(seq_lens)
        max_seq_len = backend._get_dcp_local_max_seq_len(max_seq_len)
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        return_lse=parallel.dcp_enabled,
        **_launch_kwargs(backend, layer),
    )
