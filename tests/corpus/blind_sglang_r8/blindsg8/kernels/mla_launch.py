"""Direct launchers for FlashInfer's MLA decode kernel.

Our custom MLA layer (fused rope + absorb) calls the kernel itself instead
of going through ``TRTLLMMLABackend._run_decode_kernel``; it reuses the
backend's metadata and workspace.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils import is_flashinfer_available

from blindsg8.attn.dcp_lens import kernel_kv_lens, rank_local_lens, verify_kv_lens

if is_flashinfer_available():
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.server_args import ServerArgs

logger = logging.getLogger(__name__)


def _common_kwargs(backend: "TRTLLMMLABackend", layer: "RadixAttention") -> dict:
    return dict(
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )


class MlaDecodeLauncher:
    """Binds the backend-constant kernel arguments once."""

    def __init__(self, attn_backend: "TRTLLMMLABackend"):
        self.backend = attn_backend
        self._decode = functools.partial(
            trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=attn_backend.workspace_buffer,
            qk_nope_head_dim=attn_backend.qk_nope_head_dim,
            kv_lora_rank=attn_backend.kv_lora_rank,
            qk_rope_head_dim=attn_backend.qk_rope_head_dim,
        )


class BatchLensMlaDecodeLauncher(MlaDecodeLauncher):
    # expect: SG203
    def launch_decode(self, query, kv_cache, layer, forward_batch: "ForwardBatch"):
        metadata = forward_batch.decode_trtllm_mla_metadata
        dcp = get_parallel().dcp_enabled
        return self._decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kernel_kv_lens(forward_batch),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self.backend._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )


class LocalLensMlaDecodeLauncher(MlaDecodeLauncher):
    # expect: clean
    def launch_decode(self, query, kv_cache, layer, forward_batch: "ForwardBatch"):
        metadata = forward_batch.decode_trtllm_mla_metadata
        dcp = get_parallel().dcp_enabled
        return self._decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=rank_local_lens(kernel_kv_lens(forward_batch)),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self.backend._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )


# expect: SG203
def launch_cute_dsl_decode(backend, query, kv_cache, layer, forward_batch):
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    launch_kwargs = dict(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=global_lens,
        max_seq_len=metadata.max_seq_len_k,
        backend="cute-dsl",
        **_common_kwargs(backend, layer),
    )
    parallel = get_parallel()
    if parallel.dcp_enabled:
        launch_kwargs.update(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)


# expect: clean
def launch_cute_dsl_decode_local(backend, query, kv_cache, layer, forward_batch):
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    launch_kwargs = dict(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=global_lens,
        max_seq_len=metadata.max_seq_len_k,
        backend="cute-dsl",
        **_common_kwargs(backend, layer),
    )
    parallel = get_parallel()
    if parallel.dcp_enabled:
        launch_kwargs["seq_lens"] = rank_local_lens(global_lens)
        launch_kwargs.update(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)


# expect: SG203
def launch_verify(backend, query, kv_cache, layer, forward_batch, metadata):
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
    total_lens = verify_kv_lens(forward_batch.seq_lens[:bs], ndt)
    parallel = get_parallel()
    if parallel.dcp_enabled:
        seq_lens = get_dcp_lens(total_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
    else:
        seq_lens = total_lens
    return trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=metadata.max_seq_len_k,
        return_lse=parallel.dcp_enabled,
        multi_ctas_kv_counter_buffer=backend._multi_ctas_kv_counter_buffer,
        **_common_kwargs(backend, layer),
    )


# expect: clean
def launch_verify_causal(backend, query, kv_cache, layer, forward_batch, metadata):
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
    total_lens = verify_kv_lens(forward_batch.seq_lens[:bs], ndt)
    parallel = get_parallel()
    if parallel.dcp_enabled:
        seq_lens = get_dcp_lens(total_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        dcp_kwargs = dict(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=total_lens,
            return_lse=True,
        )
    else:
        seq_lens = total_lens
        dcp_kwargs = dict(
            multi_ctas_kv_counter_buffer=backend._multi_ctas_kv_counter_buffer
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=metadata.max_seq_len_k,
        **dcp_kwargs,
        **_common_kwargs(backend, layer),
    )


# expect: SG203
def launch_draft_extend(backend, query, kv_cache, layer, forward_batch, metadata):
    bs = forward_batch.batch_size
    tokens_per_req = query.shape[0] // bs
    q = query.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
    extra = {}
    if get_parallel().dcp_enabled:
        # metadata.seq_lens_k is already this rank's share (backend init).
        extra["return_lse"] = True
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k,
        max_seq_len=metadata.max_seq_len_k + tokens_per_req,
        **extra,
        **_common_kwargs(backend, layer),
    )


# expect: clean
def launch_draft_extend_checked(backend, query, kv_cache, layer, forward_batch, metadata):
    bs = forward_batch.batch_size
    tokens_per_req = query.shape[0] // bs
    if get_parallel().dcp_enabled and tokens_per_req > 1:
        raise NotImplementedError(
            "multi-token draft extend under DCP needs causal_seqlens_kv_global"
        )
    q = query.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        seq_lens=metadata.seq_lens_k,
        max_seq_len=metadata.max_seq_len_k + tokens_per_req,
        return_lse=get_parallel().dcp_enabled,
        **_common_kwargs(backend, layer),
    )


class ServerArgsDcpLauncher(MlaDecodeLauncher):
    def __init__(
        self,
        attn_backend: "TRTLLMMLABackend",
        server_args: Optional["ServerArgs"] = None,
    ):
        super().__init__(attn_backend)
        server_args = server_args or get_server_args()
        self.dcp_size = server_args.dcp_size
        self.dcp_rank = get_parallel().dcp_rank if self.dcp_size > 1 else 0


class HostLensDcpLauncher(ServerArgsDcpLauncher):
    # expect: SG203
    def launch(self, query, kv_cache, layer, forward_batch, block_tables, max_seq_len):
        bs = forward_batch.batch_size
        bmm1_scale = self.backend._compute_decode_bmm1_scale(layer)
        if self.dcp_size > 1:
            # Host mirror: no D2H sync on the hot path.
            seq_lens = forward_batch.seq_lens_cpu[:bs].to(
                query.device, dtype=torch.int32, non_blocking=True
            )
            return self._decode(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_tables,
                seq_lens=seq_lens,
                max_seq_len=max_seq_len,
                bmm1_scale=bmm1_scale,
                return_lse=True,
            )
        return self._decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
        )


class HostLocalLensDcpLauncher(ServerArgsDcpLauncher):
    # expect: clean
    def launch(self, query, kv_cache, layer, forward_batch, block_tables, max_seq_len):
        bs = forward_batch.batch_size
        bmm1_scale = self.backend._compute_decode_bmm1_scale(layer)
        if self.dcp_size > 1:
            local_cpu = get_dcp_lens(
                forward_batch.seq_lens_cpu[:bs], self.dcp_size, self.dcp_rank
            )
            seq_lens = local_cpu.to(query.device, dtype=torch.int32, non_blocking=True)
            return self._decode(
                query=query,
                kv_cache=kv_cache,
                block_tables=block_tables,
                seq_lens=seq_lens,
                max_seq_len=max_seq_len,
                bmm1_scale=bmm1_scale,
                return_lse=True,
            )
        return self._decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
        )


# expect: SG203
def launch_decode_maybe_dcp(backend, query, kv_cache, layer, forward_batch):
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    launch = functools.partial(
        trtllm_batch_decode_with_kv_cache_mla,
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
        **_common_kwargs(backend, layer),
    )
    if not get_parallel().dcp_enabled:
        return launch(seq_lens=metadata.seq_lens_k[:bs])
    # The hoisted metadata carries both views of the lengths under DCP.
    return launch(seq_lens=metadata.global_seq_lens_k[:bs], return_lse=True)


# expect: clean
def launch_decode_maybe_dcp_local(backend, query, kv_cache, layer, forward_batch):
    metadata = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    launch = functools.partial(
        trtllm_batch_decode_with_kv_cache_mla,
        query=query,
        kv_cache=kv_cache,
        block_tables=metadata.block_kv_indices,
        max_seq_len=metadata.max_seq_len_k,
        **_common_kwargs(backend, layer),
    )
    if not get_parallel().dcp_enabled:
        return launch(seq_lens=metadata.seq_lens_k[:bs])
    # Under DCP seq_lens_k is this rank's share; global_seq_lens_k is only
    # the causal bound / merge input.
    return launch(seq_lens=metadata.seq_lens_k[:bs], return_lse=True)
