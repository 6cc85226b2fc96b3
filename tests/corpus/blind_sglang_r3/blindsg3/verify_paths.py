"""Direct FlashInfer launches for speculative target-verify / draft-extend
(used by the fork's DeepSeek MTP runner when it bypasses forward_extend)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg3.trtllm_variants import VerifyOnGenTRTLLMMLABackend

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _common_kwargs(backend: TRTLLMMLABackend, kv_cache, metadata, layer):
    return dict(
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


# expect: SG203
def launch_target_verify(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: "RadixAttention",
    draft_token_num: int,
):
    """Dense [bs, draft_token_num] target-verify on trtllm-gen."""
    bs = metadata.block_kv_indices.shape[0]
    query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    kwargs = _common_kwargs(backend, kv_cache, metadata, layer)
    kwargs["multi_ctas_kv_counter_buffer"] = backend._multi_ctas_kv_counter_buffer
    dcp = get_parallel().dcp_enabled
    out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        seq_lens=metadata.seq_lens_k,
        return_lse=dcp,
        **kwargs,
    )
    return out


# expect: clean
def launch_target_verify_checked(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: "RadixAttention",
    draft_token_num: int,
):
    """Dense [bs, draft_token_num] target-verify on trtllm-gen (no DCP)."""
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "trtllm-gen has no global causal bound for a DCP target-verify; "
            "use launch_target_verify_dcp"
        )
    bs = metadata.block_kv_indices.shape[0]
    query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    kwargs = _common_kwargs(backend, kv_cache, metadata, layer)
    kwargs["multi_ctas_kv_counter_buffer"] = backend._multi_ctas_kv_counter_buffer
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        seq_lens=metadata.seq_lens_k,
        **kwargs,
    )


# expect: clean
def launch_target_verify_dcp(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    metadata: TRTLLMMLADecodeMetadata,
    layer: "RadixAttention",
    draft_token_num: int,
):
    """DCP target-verify through the cute-dsl kernel with the global bound."""
    parallel = get_parallel()
    bs = metadata.block_kv_indices.shape[0]
    query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    kwargs = _common_kwargs(backend, kv_cache, metadata, layer)
    if parallel.dcp_enabled:
        kwargs.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k.to(torch.int32),
            return_lse=True,
        )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        seq_lens=metadata.seq_lens_k,
        **kwargs,
    )


class DenseDraftExtendTRTLLMMLABackend(TRTLLMMLABackend):
    """Draft-extend with a uniform accept length, run as a dense decode."""

    # expect: clean
    def forward_dense_draft_extend(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        tokens_per_req: int,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        query = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.page_size, self.kv_cache_dim).unsqueeze(1)
        raw_out = self._run_decode_kernel(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DenseDraftExtendOnGenTRTLLMMLABackend(VerifyOnGenTRTLLMMLABackend):
    """Same dense draft-extend, on the fork's relaxed trtllm-gen launcher."""

    # expect: SG203
    def forward_dense_draft_extend(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        tokens_per_req: int,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        query = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.page_size, self.kv_cache_dim).unsqueeze(1)
        raw_out = self._run_decode_kernel(
            query=query.to(self.data_type),
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
