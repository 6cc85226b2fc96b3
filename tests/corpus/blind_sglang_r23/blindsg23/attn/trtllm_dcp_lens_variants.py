"""More DCP decode variants: where the per-request lengths come from.

These all keep the upstream rank-local block table and differ only in how the
``seq_lens`` handed to the decode kernel are produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg23.attn.trtllm_dcp_decode import DcpDecodeBackendBase
from blindsg23.common.dcp_lens import rank_local_lens


class DiscardedLocalizeBackend(DcpDecodeBackendBase):
    # idiom: layers/dcp/layout.py get_dcp_lens used from TRTLLMMLABackend._get_dcp_local_seq_lens
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32, copy=True)
        parallel = get_parallel()
        if parallel.dcp_enabled:
            # shard the lengths to this rank
            get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class InPlaceLocalizeBackend(DcpDecodeBackendBase):
    # idiom: layers/dcp/layout.py update_local_kv_lens_for_dcp (in-place, as in FlashInferMLAAttnBackend._apply_cuda_graph_metadata)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # Own copy: the in-place shard must not touch the batch's seq_lens.
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32, copy=True)
        update_local_kv_lens_for_dcp(kv_lens)
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


@dataclass
class DcpDecodeMeta:
    """Per-step DCP decode lengths, built once and reused by every layer."""

    local_kv_lens: torch.Tensor
    global_kv_lens: torch.Tensor
    max_local_len: int


class MetaDecodeBackendBase(DcpDecodeBackendBase):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._dcp_meta = None
        if not (get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode()):
            return
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        self._dcp_meta = DcpDecodeMeta(
            local_kv_lens=self._get_dcp_local_seq_lens(global_lens),
            global_kv_lens=global_lens,
            max_local_len=self._get_dcp_local_max_seq_len(self.max_context_len),
        )


class SwappedMetaDecodeBackend(MetaDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLADecodeMetadata (seq_lens_k vs global_seq_lens_k) in forward_decode
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        meta: Optional[DcpDecodeMeta] = getattr(self, "_dcp_meta", None)
        if meta is None or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            meta.global_kv_lens,
            meta.max_local_len,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, meta.local_kv_lens, layer, bs)


class MetaDecodeBackend(MetaDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLADecodeMetadata (hoisted rank-local lens) in forward_decode
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        meta: Optional[DcpDecodeMeta] = getattr(self, "_dcp_meta", None)
        if meta is None or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            meta.local_kv_lens,
            meta.max_local_len,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, meta.local_kv_lens, layer, bs)


class CpuMirrorDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (seq_lens_cpu host mirror)
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if (
            not self._dcp_decode_applies(forward_batch)
            or forward_batch.seq_lens_cpu is None
            or llama_4_scaling is not None
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # Host mirror is exact and avoids reading the device tensor the
        # previous step may still be writing.
        kv_lens = forward_batch.seq_lens_cpu[:bs].to(
            device=query.device, dtype=torch.int32, non_blocking=True
        )
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class DecoratedLaunchDecodeBackend(DcpDecodeBackendBase):
    @rank_local_lens
    def _launch_local(self, query, kv_cache, block_tables, max_seq_len, layer, *, seq_lens):
        return self._launch_mla(
            query, kv_cache, block_tables, seq_lens, max_seq_len, layer, return_lse=True
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (seq_lens_cpu) + fork @rank_local_lens launch
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if (
            not self._dcp_decode_applies(forward_batch)
            or forward_batch.seq_lens_cpu is None
            or llama_4_scaling is not None
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens = forward_batch.seq_lens_cpu[:bs].to(
            device=query.device, dtype=torch.int32, non_blocking=True
        )
        # _launch_local shards seq_lens to this rank before the kernel sees them.
        raw_out, lse = self._launch_local(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.max_seq_len_k,
            layer,
            seq_lens=global_lens,
        )
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        return self._finish_rank_local(raw_out, lse, local_lens, layer, bs)


class GlobalMaxLocalLensBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (max_seq from seq_lens_cpu as a bound)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not self._dcp_decode_applies(forward_batch) or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache, metadata, bs = self._prep_dcp_decode(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        # max_seq_len is only a scheduling bound: the whole-sequence maximum
        # over-estimates this rank's and is safe (the table is sized for the
        # context length). The lengths the kernel walks are rank-local.
        if forward_batch.seq_lens_cpu is not None:
            bound = int(forward_batch.seq_lens_cpu[:bs].max().item())
        else:
            bound = self.max_context_len
        kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._launch_mla(
            query,
            kv_cache,
            metadata.block_kv_indices,
            kv_lens,
            max(bound, 1),
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs)


class NonDcpOnlyDecodeBackend(DcpDecodeBackendBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (non-DCP fast path, DCP deferred upstream)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if (
            parallel.dcp_enabled
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            # DCP (rank-local lens + LSE for the merge) stays on upstream's path.
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out = self._launch_mla(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            forward_batch.seq_lens[:bs],
            metadata.max_seq_len_k,
            layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
