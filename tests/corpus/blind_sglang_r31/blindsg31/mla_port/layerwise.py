"""Layer-wise decode driver: per-layer metadata prepared once per step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

import torch

from sglang.srt.runtime_context import get_parallel

from blindsg31.mla_port import kernel_shim
from blindsg31.mla_port.lengths import RankLens
from blindsg31.mla_port.metadata import (
    LayerMLAMeta,
    build_layer_meta_local,
    build_layer_meta_raw,
)

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class LayerwiseMLADecoder:
    """Sparse-layer models (MLA on a subset of layers) keep per-layer tables."""

    def __init__(self, backend, mla_layer_ids):
        self.backend = backend
        self.mla_layer_ids = list(mla_layer_ids)
        self._meta_by_layer: Dict[int, LayerMLAMeta] = {}

    def prepare(self, forward_batch: "ForwardBatch", block_tables: Dict[int, torch.Tensor]):
        for layer_id in self.mla_layer_ids:
            self._meta_by_layer[layer_id] = build_layer_meta_raw(
                block_tables[layer_id],
                forward_batch.seq_lens,
                self.backend.max_context_len,
            )

    def _dims(self, layer):
        b = self.backend
        return dict(
            qk_nope_head_dim=b.qk_nope_head_dim,
            kv_lora_rank=b.kv_lora_rank,
            qk_rope_head_dim=b.qk_rope_head_dim,
            bmm1_scale=b._compute_decode_bmm1_scale(layer),
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; per-layer meta property (built from whole lengths in prepare) handed to the decode launch with DCP LSE
    # expect: SG203
    def decode_layer(self, layer: "RadixAttention", query, kv_cache, forward_batch: "ForwardBatch"):
        meta = self._meta_by_layer[layer.layer_id]
        bs = forward_batch.batch_size
        return kernel_shim.trtllm_gen_mla_decode(
            query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            kv_cache,
            self.backend.workspace_buffer,
            meta.block_kv_indices,
            meta.kernel_seq_lens,
            meta.max_seq_len_k,
            return_lse=get_parallel().dcp_enabled,
            **self._dims(layer),
        )


class LayerwiseMLADecoderDCP(LayerwiseMLADecoder):
    def prepare(self, forward_batch: "ForwardBatch", block_tables: Dict[int, torch.Tensor]):
        for layer_id in self.mla_layer_ids:
            self._meta_by_layer[layer_id] = build_layer_meta_local(
                block_tables[layer_id],
                forward_batch.seq_lens,
                self.backend.max_context_len,
            )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; per-layer meta property built from the rank-local share, single-token launch
    # expect: clean
    def decode_layer(self, layer: "RadixAttention", query, kv_cache, forward_batch: "ForwardBatch"):
        meta = self._meta_by_layer.get(layer.layer_id)
        bs = forward_batch.batch_size
        if meta is None:
            lens = RankLens.from_global(forward_batch.seq_lens[:bs])
            meta = LayerMLAMeta(
                self.backend.forward_decode_metadata.block_kv_indices,
                lens.kernel,
                self.backend.forward_decode_metadata.max_seq_len_k,
                global_seq_lens_k=lens.causal,
            )
        return kernel_shim.trtllm_gen_mla_decode(
            query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            kv_cache,
            self.backend.workspace_buffer,
            meta.block_kv_indices,
            meta.kernel_seq_lens,
            meta.max_seq_len_k,
            return_lse=get_parallel().dcp_enabled,
            **self._dims(layer),
        )


class DcpDispatchingDecoder(LayerwiseMLADecoder):
    """Routes DCP decodes to the backend's own rank-local path."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode; early return to the inherited _forward_decode_dcp under DCP, whole lengths only on the non-DCP path
    # expect: clean
    def decode_layer(self, layer: "RadixAttention", query, kv_cache, forward_batch: "ForwardBatch"):
        bs = forward_batch.batch_size
        metadata = self.backend.forward_decode_metadata
        if get_parallel().dcp_enabled:
            return self.backend._forward_decode_dcp(
                query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
                kv_cache,
                metadata,
                layer,
                forward_batch,
            )
        return kernel_shim.trtllm_gen_mla_decode(
            query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            kv_cache,
            self.backend.workspace_buffer,
            metadata.block_kv_indices,
            forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k,
            **self._dims(layer),
        )
