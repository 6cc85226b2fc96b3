"""CUDA-graph capture / replay buffers of the DCP port. The captured kernels
read these buffers; replay prep refreshes them out of graph."""

from __future__ import annotations

from typing import Dict, Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg34.dcp.cutedsl_mla_dcp import VendorCuteDslMLADcpBackend
from blindsg34.dcp.lens import to_local, verify_global_lens
from blindsg34.dcp.metadata import DcpGraphLens
from blindsg34.dcp.world import dcp_from_group


class TRTLLMMLADcpGraphBackend(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            # Plain decode: one int64 -> int32 copy into the static buffer the
            # captured kernel reads; the shard is in the page table below.
            metadata.seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
        )


class TRTLLMMLADcpGraphBackendGroupWorld(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        dcp_size, dcp_rank = dcp_from_group()
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        metadata.seq_lens_k.copy_(
            get_dcp_lens(metadata.global_seq_lens_k, dcp_size, dcp_rank)
        )
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class CuteDslGraphLensCache(VendorCuteDslMLADcpBackend):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._graph_lens: Dict[int, DcpGraphLens] = {}

    def _init_cuda_graph_metadata(self, bs, num_tokens, forward_mode, seq_lens, device):
        super()._init_cuda_graph_metadata(bs, num_tokens, forward_mode, seq_lens, device)
        metadata = self.decode_cuda_graph_metadata[bs]
        self._graph_lens[bs] = DcpGraphLens(
            buffers={"local": metadata.seq_lens_k, "global": metadata.global_seq_lens_k}
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (capture-stable length buffers)
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        slot = self._graph_lens[bs]
        if forward_mode.is_target_verify():
            step_lens = verify_global_lens(seq_lens[:bs], self.num_draft_tokens)
        else:
            step_lens = seq_lens[:bs].to(torch.int32)
        # Refresh every captured length buffer of this bucket.
        for _name, buf in slot.buffers.items():
            buf.copy_(step_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            to_local(step_lens, self.dcp_world, self.dcp_rank),
        )


class CuteDslGraphLensCacheLocalized(CuteDslGraphLensCache):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (capture-stable length buffers)
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        slot = self._graph_lens[bs]
        if forward_mode.is_target_verify():
            step_lens = verify_global_lens(seq_lens[:bs], self.num_draft_tokens)
        else:
            step_lens = seq_lens[:bs].to(torch.int32)
        updates = {
            "global": step_lens,
            "local": to_local(step_lens, self.dcp_world, self.dcp_rank),
        }
        for name, buf in slot.buffers.items():
            buf.copy_(updates[name])
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], updates["local"]
        )


class VendorDcpDecodeGraph(VendorCuteDslMLADcpBackend):
    """Vendor-owned capture-stable buffers for the captured DCP decode."""

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, kv_indices_buf=None):
        super().init_cuda_graph_state(max_bs, max_num_tokens, kv_indices_buf)
        self.cg_local_lens = torch.ones((max_bs,), dtype=torch.int32, device=self.device)
        self.cg_global_lens = torch.ones((max_bs,), dtype=torch.int32, device=self.device)

    def captured_decode(self, query: torch.Tensor, layer: RadixAttention, bs: int):
        """Recorded inside the graph: reads only the capture-stable buffers."""
        metadata = self.decode_cuda_graph_metadata[bs]
        raw_out, lse = self._launch(
            query,
            layer,
            metadata.block_kv_indices,
            self.cg_local_lens[:bs],
            self.cg_global_lens[:bs],
            metadata.max_seq_len_k,
        )
        return self._finish(raw_out, lse, self.cg_local_lens[:bs], bs, 1, layer)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata_out_graph (replay prep into capture-stable buffers)
    # expect: clean
    def prepare_replay(self, bs: int, forward_batch: ForwardBatch) -> None:
        self.init_forward_metadata_out_graph(forward_batch)
        metadata = self.decode_cuda_graph_metadata[bs]
        self.cg_global_lens[:bs].copy_(metadata.global_seq_lens_k[:bs])
        self.cg_local_lens[:bs].copy_(metadata.seq_lens_k[:bs])


class VendorDcpDecodeGraphMirror(VendorDcpDecodeGraph):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata_out_graph (replay prep into capture-stable buffers)
    # expect: SG203
    def prepare_replay(self, bs: int, forward_batch: ForwardBatch) -> None:
        self.init_forward_metadata_out_graph(forward_batch)
        metadata = self.decode_cuda_graph_metadata[bs]
        # Mirror the replay-prepped lengths into the vendor buffers.
        for dst in (self.cg_global_lens, self.cg_local_lens):
            dst[:bs].copy_(metadata.global_seq_lens_k[:bs])


class CuteDslVerifyGraphBackend(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (DCP dispatch)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        if forward_mode.is_target_verify():
            # Verify first: fixed window, same for every DCP layout.
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(metadata.global_seq_lens_k)
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                req_pool_indices[:bs],
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
            )
            return
        if get_parallel().dcp_enabled:
            return self._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        return super()._apply_cuda_graph_metadata(
            plan, bs, req_pool_indices, seq_lens, forward_mode
        )


class CuteDslVerifyGraphBackendDcpFirst(VendorCuteDslMLADcpBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (DCP dispatch)
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        if get_parallel().dcp_enabled:
            # Every mode under DCP goes through the shard-aware body.
            return self._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        return super()._apply_cuda_graph_metadata(
            plan, bs, req_pool_indices, seq_lens, forward_mode
        )
