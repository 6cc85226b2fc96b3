"""Layer-batched MLA decode: one call decodes a group of layers that share
the step's block table (used by the fork's layer-pipelined DeepSeek decode).

Hierarchy: TRTLLMMLABackend -> ForkTRTLLMMLABase -> LayeredMLABackend -> ...
"""

from __future__ import annotations

from typing import List, Sequence

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg23.attn.mla_fork_base import ForkTRTLLMMLABase


class LayeredMLABackend(ForkTRTLLMMLABase):
    """Adds the per-layer loop scaffolding; subclasses pick the lengths."""

    def _layer_group_prep(self, forward_batch: ForwardBatch):
        metadata = self._decode_metadata(forward_batch)
        return metadata, forward_batch.batch_size, get_parallel().dcp_enabled

    def _collect(self, raw, dcp_enabled: bool, local_lens, layer, bs):
        if dcp_enabled:
            raw_out, lse = raw
            return self._finish_rank_local(raw_out, lse, local_lens, layer, bs)
        return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class PerLayerWindowMLABackend(LayeredMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (looped over a layer group)
    # expect: SG203
    def forward_decode_layers(
        self,
        queries: Sequence[torch.Tensor],
        layers: Sequence,
        forward_batch: ForwardBatch,
    ) -> List:
        metadata, bs, dcp_enabled = self._layer_group_prep(forward_batch)
        # Hoisted out of the layer loop: one cast per step.
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        # Already this rank's bound under DCP (init_forward_metadata).
        max_seq_len = metadata.max_seq_len_k
        outputs = []
        for query, layer in zip(queries, layers):
            raw = self._launch_mla(
                query,
                self._kv_cache_view(layer),
                metadata.block_kv_indices,
                kv_lens,
                max_seq_len,
                layer,
                return_lse=dcp_enabled,
            )
            outputs.append(self._collect(raw, dcp_enabled, kv_lens, layer, bs))
        return outputs


class PerLayerWindowMLABackendLocal(LayeredMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (layer group, _get_dcp_local_seq_lens hoisted)
    # expect: clean
    def forward_decode_layers(
        self,
        queries: Sequence[torch.Tensor],
        layers: Sequence,
        forward_batch: ForwardBatch,
    ) -> List:
        metadata, bs, dcp_enabled = self._layer_group_prep(forward_batch)
        # Hoisted out of the layer loop: one cast + one shard per step.
        kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs]).to(
            torch.int32
        )
        # Already this rank's bound under DCP (init_forward_metadata).
        max_seq_len = metadata.max_seq_len_k
        outputs = []
        for query, layer in zip(queries, layers):
            raw = self._launch_mla(
                query,
                self._kv_cache_view(layer),
                metadata.block_kv_indices,
                kv_lens,
                max_seq_len,
                layer,
                return_lse=dcp_enabled,
            )
            outputs.append(self._collect(raw, dcp_enabled, kv_lens, layer, bs))
        return outputs
