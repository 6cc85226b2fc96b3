"""Per-layer MLA decode launches for the DCP bring-up harness.

The harness drives one attention backend instance layer by layer (no model
forward), so kernel regressions can be bisected per layer and per draft step.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List, Sequence

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg33.dcp.lens import dcp_world, kernel_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class DcpLayerLauncher:
    """Launches rank-local MLA decode for every layer of a DCP deployment."""

    def __init__(self, backend: CuteDslMLABackend, layers: Sequence["RadixAttention"]):
        if not get_parallel().dcp_enabled:
            raise ValueError("DcpLayerLauncher drives decode-context-parallel runs only")
        self.backend = backend
        self.layers = list(layers)

    def _kv(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.backend.page_size).unsqueeze(1)

    def _call(self, q, layer, block_tables, seq_lens, causal_lens, max_seq_len):
        size, rank = dcp_world()
        return self.backend._run_decode_kernel(
            query=q,
            kv_cache=self._kv(layer),
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            causal_seqs=causal_lens,
            cp_world=size,
            cp_rank=rank,
            return_lse=True,
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel driven per layer — a lambda closes over forward_batch.seq_lens[:bs] and passes it as seq_lens and causal_seqs for every layer
    # expect: SG203
    def decode_all_layers(
        self,
        queries: List[torch.Tensor],
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        launch = lambda q, layer: self._call(
            q, layer, metadata.block_kv_indices, seq_lens, seq_lens,
            metadata.max_seq_len_k,
        )
        return [launch(q, layer) for q, layer in zip(queries, self.layers)]

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel driven per layer — a lambda closes over backend._get_dcp_local_seq_lens(global) as seq_lens and the batch lengths as causal_seqs
    # expect: clean
    def decode_all_layers_hoisted(
        self,
        queries: List[torch.Tensor],
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = self.backend._get_dcp_local_seq_lens(global_lens)
        launch = lambda q, layer: self._call(
            q, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )
        return [launch(q, layer) for q, layer in zip(queries, self.layers)]

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted vs non-hoisted lens) — try reads metadata.seq_lens_k[:bs]; the AttributeError/TypeError fallback takes forward_batch.seq_lens[:bs]
    # expect: SG203
    def decode_layer_with_fallback(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        try:
            local_lens = metadata.seq_lens_k[:bs]
            if local_lens.dtype != torch.int32:
                local_lens = local_lens.to(torch.int32)
        except (AttributeError, TypeError):
            logger.debug("decode metadata has no hoisted lens; using batch lens")
            local_lens = global_lens
        return self._call(
            q, layer, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k,
        )

    # idiom: layers/dcp/layout.py get_dcp_lens through blindsg33.dcp.lens.kernel_lens — kernel lens from kernel_lens(global_lens) called with its default dcp_size / dcp_rank
    # expect: SG203
    def decode_layer_via_helper(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        bs = forward_batch.batch_size
        if bs == 0:
            return None
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        lens = kernel_lens(global_lens)
        return self._call(
            q, layer, metadata.block_kv_indices, lens, global_lens,
            metadata.max_seq_len_k,
        )

    # idiom: layers/dcp/layout.py get_dcp_lens through blindsg33.dcp.lens.kernel_lens — kernel lens from kernel_lens(global_lens, *dcp_world())
    # expect: clean
    def decode_layer_via_world(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        bs = forward_batch.batch_size
        if bs == 0:
            return None
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        lens = kernel_lens(global_lens, *dcp_world())
        return self._call(
            q, layer, metadata.block_kv_indices, lens, global_lens,
            metadata.max_seq_len_k,
        )


class DraftStepProbe:
    """Replays a chain draft's per-step single-token decodes on one layer
    (topk == 1: one query row per request per step)."""

    def __init__(self, backend: TRTLLMMLABackend, layer: "RadixAttention"):
        self.backend = backend
        self.layer = layer

    def _launch(self, q, block_tables, seq_lens, max_seq_len):
        backend = self.backend
        k_cache = backend.token_to_kv_pool.get_key_buffer(self.layer.layer_id)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q.unsqueeze(1),
            kv_cache=paged_row_view(k_cache, backend.page_size).unsqueeze(1),
            workspace_buffer=backend.workspace_buffer,
            qk_nope_head_dim=backend.qk_nope_head_dim,
            kv_lora_rank=backend.kv_lora_rank,
            qk_rope_head_dim=backend.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=backend._compute_decode_bmm1_scale(self.layer),
            return_lse=get_parallel().dcp_enabled,
        )

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward step loop, kernel side — per step i the [bs, 1] query is launched with seq_lens = (forward_batch.seq_lens + i).int()
    # expect: SG203
    def replay_steps(self, step_queries, forward_batch: ForwardBatch, metadata: TRTLLMMLADecodeMetadata):
        bs = forward_batch.batch_size
        outs = []
        for step, q in enumerate(step_queries):
            step_lens = (forward_batch.seq_lens[:bs] + step).to(torch.int32)
            outs.append(
                self._launch(q, metadata.block_kv_indices, step_lens, metadata.max_seq_len_k + step)
            )
        return outs

    # idiom: speculative/eagle_worker_v2.py EagleDraftWorker.draft_forward step loop, kernel side — per step i the [bs, 1] query is launched with seq_lens = backend._get_dcp_local_seq_lens(forward_batch.seq_lens + i)
    # expect: clean
    def replay_steps_sharded(self, step_queries, forward_batch: ForwardBatch, metadata: TRTLLMMLADecodeMetadata):
        bs = forward_batch.batch_size
        outs = []
        for step, q in enumerate(step_queries):
            step_lens = self.backend._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs] + step)
            max_len = self.backend._get_dcp_local_max_seq_len(metadata.max_seq_len_k + step)
            outs.append(self._launch(q, metadata.block_kv_indices, step_lens, max_len))
        return outs


class ReplicatedLayerLauncher:
    """Per-layer launcher for deployments without decode context parallelism."""

    def __init__(self, backend: TRTLLMMLABackend, layers: Sequence["RadixAttention"]):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "ReplicatedLayerLauncher expects the full KV on every rank"
            )
        self.backend = backend
        self.layers = list(layers)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (non-DCP branch) driven per layer — seq_lens = forward_batch.seq_lens for every layer, no LSE
    # expect: clean
    def decode_all_layers(self, queries, forward_batch: ForwardBatch, metadata: TRTLLMMLADecodeMetadata):
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        outs = []
        for q, layer in zip(queries, self.layers):
            k_cache = self.backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
            outs.append(
                self.backend._run_decode_kernel(
                    query=q,
                    kv_cache=paged_row_view(k_cache, self.backend.page_size).unsqueeze(1),
                    block_tables=metadata.block_kv_indices,
                    seq_lens=seq_lens,
                    max_seq_len=metadata.max_seq_len_k,
                    layer=layer,
                )
            )
        return outs


class SwitchingLayerLauncher:
    def __init__(self, backend: CuteDslMLABackend):
        self.backend = backend

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode — returns early with the whole-length non-DCP launch when dcp_enabled is false; the DCP path passes _get_dcp_local_seq_lens(global) and causal_seqs=global with cp_world / cp_rank
    # expect: clean
    def decode_layer(self, q, kv_cache, layer, forward_batch: ForwardBatch, metadata: TRTLLMMLADecodeMetadata):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if not parallel.dcp_enabled:
            return self.backend._run_decode_kernel(
                query=q,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=global_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
        return self.backend._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self.backend._get_dcp_local_seq_lens(global_lens),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
