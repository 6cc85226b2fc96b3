"""Decode metadata containers for the DCP ports: dict-keyed capture buffers,
named tuples of lengths, plan objects built by classmethods, and views."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg33.dcp.lens import DcpLens, split_dcp_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


def launch_dcp_decode(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    kernel_lens: torch.Tensor,
    causal_lens: Optional[torch.Tensor],
    max_seq_len: int,
    layer: "RadixAttention",
):
    parallel = get_parallel()
    bs = kernel_lens.shape[0]
    raw_out, lse = backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        seq_lens=kernel_lens,
        max_seq_len=max_seq_len,
        layer=layer,
        causal_seqs=causal_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )
    out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(out, lse, kernel_lens, backend.q_indptr_decode[: bs + 1], 1)
    return out.flatten(1), lse


class _RoutedCuteDsl(CuteDslMLABackend):
    """cute-dsl kernel, TRTLLM decode body: every DCP decode goes through the
    single ``_forward_decode_dcp`` hook."""

    forward_decode = TRTLLMMLABackend.forward_decode


# ---------------------------------------------------------------------------
# dict-keyed capture buffers
# ---------------------------------------------------------------------------
class _DictBufferCuteDsl(_RoutedCuteDsl):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._dcp_graph_buffers: Dict[int, Dict[str, torch.Tensor]] = {}

    def _entry(self, bs: int) -> Dict[str, torch.Tensor]:
        entry = self._dcp_graph_buffers.get(bs)
        if entry is None:
            entry = {
                "global": torch.zeros((bs,), dtype=torch.int32, device=self.device),
                "local": torch.zeros((bs,), dtype=torch.int32, device=self.device),
                "table": self.decode_cuda_graph_kv_indices[:bs],
            }
            self._dcp_graph_buffers[bs] = entry
        return entry

    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        self._stash_decode_lens(bs, seq_lens, req_pool_indices)

    def _stash_decode_lens(self, bs, seq_lens, req_pool_indices):
        raise NotImplementedError

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        entry = self._entry(forward_batch.batch_size)
        return launch_dcp_decode(
            self, query, kv_cache, entry["table"], entry["local"], entry["global"],
            metadata.max_seq_len_k, layer,
        )


class ReplayDictCuteDsl(_DictBufferCuteDsl):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata — replay writes into a dict entry per bs: entry["global"] and entry["local"] both copied from seq_lens[:bs], page table filled from entry["local"]
    # expect: SG203
    def _stash_decode_lens(self, bs: int, seq_lens: torch.Tensor, req_pool_indices: torch.Tensor):
        entry = self._entry(bs)
        entry["global"].copy_(seq_lens[:bs])
        entry["local"].copy_(seq_lens[:bs])
        self._fill_dcp_block_kv_indices(entry["table"], req_pool_indices[:bs], entry["local"])


class TieredDictCuteDsl(_DictBufferCuteDsl):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata — replay writes into a dict entry per bs: entry["global"] from seq_lens[:bs], entry["local"] from _get_dcp_local_seq_lens(entry["global"])
    # expect: clean
    def _stash_decode_lens(self, bs: int, seq_lens: torch.Tensor, req_pool_indices: torch.Tensor):
        entry = self._entry(bs)
        entry["global"].copy_(seq_lens[:bs])
        entry["local"].copy_(self._get_dcp_local_seq_lens(entry["global"]))
        self._fill_dcp_block_kv_indices(entry["table"], req_pool_indices[:bs], entry["local"])


# ---------------------------------------------------------------------------
# named tuples
# ---------------------------------------------------------------------------
class NamedLensCuteDsl(_RoutedCuteDsl):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (non-hoisted DCP branch) — lengths unpacked from split_dcp_lens() (a DcpLens(local, global_) named tuple) as `global_lens, local_lens`, then seq_lens=local_lens, causal_seqs=global_lens
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        global_lens, local_lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        return launch_dcp_decode(
            self, query, kv_cache, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k, layer,
        )


class UnpackedLensCuteDsl(_RoutedCuteDsl):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (non-hoisted DCP branch) — lengths unpacked from split_dcp_lens() as `local_lens, global_lens`, then seq_lens=local_lens, causal_seqs=global_lens
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local_lens, global_lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        return launch_dcp_decode(
            self, query, kv_cache, metadata.block_kv_indices, local_lens, global_lens,
            metadata.max_seq_len_k, layer,
        )


# ---------------------------------------------------------------------------
# plan objects built by classmethods
# ---------------------------------------------------------------------------
@dataclass
class DcpDecodePlan:
    block_tables: torch.Tensor
    kernel_lens: torch.Tensor
    causal_lens: Optional[torch.Tensor]
    max_seq_len: int

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLADecodeMetadata (hoisted lens) — classmethod factory: kernel_lens from metadata.global_seq_lens_k when it is set, else forward_batch.seq_lens
    # expect: SG203
    @classmethod
    def from_metadata(
        cls, metadata: TRTLLMMLADecodeMetadata, forward_batch: ForwardBatch
    ) -> "DcpDecodePlan":
        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            lens = metadata.global_seq_lens_k[:bs]
        else:
            lens = forward_batch.seq_lens[:bs].to(torch.int32)
        return cls(
            block_tables=metadata.block_kv_indices,
            kernel_lens=lens,
            causal_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLADecodeMetadata (hoisted lens) — classmethod factory: kernel_lens from backend._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs]), causal_lens the batch lengths
    # expect: clean
    @classmethod
    def from_backend(
        cls,
        backend: TRTLLMMLABackend,
        metadata: TRTLLMMLADecodeMetadata,
        forward_batch: ForwardBatch,
    ) -> "DcpDecodePlan":
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        return cls(
            block_tables=metadata.block_kv_indices,
            kernel_lens=backend._get_dcp_local_seq_lens(global_lens),
            causal_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
        )


class PlanObjectCuteDsl(_RoutedCuteDsl):
    use_backend_factory = True

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        plan = (
            DcpDecodePlan.from_backend(self, metadata, forward_batch)
            if self.use_backend_factory
            else DcpDecodePlan.from_metadata(metadata, forward_batch)
        )
        return launch_dcp_decode(
            self, query, kv_cache, plan.block_tables, plan.kernel_lens,
            plan.causal_lens, plan.max_seq_len, layer,
        )


# ---------------------------------------------------------------------------
# views with properties
# ---------------------------------------------------------------------------
class HoistedLensView:
    def __init__(self, metadata: TRTLLMMLADecodeMetadata, bs: int):
        self._md = metadata
        self._bs = bs

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted path) — property kernel_seq_lens: metadata.global_seq_lens_k[:bs] when present, else metadata.seq_lens_k[:bs]
    # expect: SG203
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        if self._md.global_seq_lens_k is not None:
            return self._md.global_seq_lens_k[: self._bs]
        return self._md.seq_lens_k[: self._bs]

    @property
    def causal_seq_lens(self) -> Optional[torch.Tensor]:
        if self._md.global_seq_lens_k is None:
            return None
        return self._md.global_seq_lens_k[: self._bs]


class PairedLensView:
    def __init__(self, metadata: TRTLLMMLADecodeMetadata, bs: int):
        self._md = metadata
        self._bs = bs

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (hoisted path) — property lens: DcpLens(local=metadata.seq_lens_k[:bs], global_=metadata.global_seq_lens_k[:bs])
    # expect: clean
    @property
    def lens(self) -> DcpLens:
        return DcpLens(
            local=self._md.seq_lens_k[: self._bs],
            global_=self._md.global_seq_lens_k[: self._bs],
        )


class ViewCuteDsl(_RoutedCuteDsl):
    paired = False

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if self.paired:
            local_lens, global_lens = PairedLensView(metadata, bs).lens
        else:
            view = HoistedLensView(metadata, bs)
            local_lens, global_lens = view.kernel_seq_lens, view.causal_seq_lens
        return launch_dcp_decode(
            self, query, kv_cache, metadata.block_kv_indices, local_lens,
            global_lens, metadata.max_seq_len_k, layer,
        )
