"""CUDA-graph replay buffers for the ported MLA decode.

The captured decode graph reads ``seq_lens_k`` (the kernel's per-request KV
extent on this rank), ``global_seq_lens_k`` (the causal bound for multi-token
queries) and ``block_kv_indices`` from these static buffers; replay only
refreshes their contents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg31.mla_port import kernel_shim
from blindsg31.mla_port.lengths import local_lens

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode


class MLAGraphReplayBuffers:
    def __init__(self, max_bs: int, max_blocks: int, device: torch.device):
        self.seq_lens_k = torch.zeros((max_bs,), dtype=torch.int32, device=device)
        self.global_seq_lens_k = torch.zeros((max_bs,), dtype=torch.int32, device=device)
        self.block_kv_indices = torch.full(
            (max_bs, max_blocks), -1, dtype=torch.int32, device=device
        )
        self.kv_len_arr_cpu = torch.zeros((max_bs,), dtype=torch.int32)
        self.kv_indptr_cpu = torch.zeros((max_bs + 1,), dtype=torch.int32)
        self.qo_indptr_cpu = torch.arange(0, max_bs + 1, dtype=torch.int32)

    def named(self) -> Dict[str, torch.Tensor]:
        return {
            "seq_lens_k": self.seq_lens_k,
            "global_seq_lens_k": self.global_seq_lens_k,
            "block_kv_indices": self.block_kv_indices,
        }

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (decode); copies forward seq_lens into the graph's seq_lens_k buffer with DCP on
    # expect: SG203
    def refresh_decode(self, bs: int, seq_lens: torch.Tensor):
        if get_parallel().dcp_enabled:
            self.global_seq_lens_k[:bs].copy_(seq_lens[:bs])
        self.seq_lens_k[:bs].copy_(seq_lens[:bs])

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (decode); global lengths and the rank-local share into their graph buffers
    # expect: clean
    def refresh_decode_local(self, bs: int, seq_lens: torch.Tensor):
        parallel = get_parallel()
        self.global_seq_lens_k[:bs].copy_(seq_lens[:bs])
        if parallel.dcp_enabled:
            self.seq_lens_k[:bs].copy_(
                get_dcp_lens(seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank)
            )
        else:
            self.seq_lens_k[:bs].copy_(seq_lens[:bs])

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (target verify); global = seq_lens + draft tokens, local share derived from it
    # expect: clean
    def refresh_verify(self, bs: int, seq_lens: torch.Tensor, num_draft_tokens: int):
        torch.add(seq_lens[:bs], num_draft_tokens, out=self.global_seq_lens_k[:bs])
        self.seq_lens_k[:bs].copy_(local_lens(self.global_seq_lens_k[:bs]))

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (draft extend); global buffer refreshed, local buffer gets the same whole lengths
    # expect: SG203
    def refresh_draft_extend(self, bs: int, seq_lens: torch.Tensor):
        seq_lens = seq_lens[:bs]
        self.global_seq_lens_k[:bs].copy_(seq_lens)
        self.seq_lens_k[:bs].copy_(self.global_seq_lens_k[:bs])

    # idiom: layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode fast plan); host kv_len_arr from seq_lens_cpu, no DCP localization, then wrapper.plan
    # expect: SG203
    def refresh_fast_plan_host(self, wrapper, updater, bs: int, seq_lens_cpu: torch.Tensor, kv_indices: torch.Tensor):
        # Decode under DCP: updater.num_local_heads counts the all-gathered
        # query heads (num_heads // attn_tp * attn_dcp).
        self.kv_len_arr_cpu[:bs] = seq_lens_cpu[:bs].to(torch.int32)
        self.kv_indptr_cpu[1 : bs + 1] = torch.cumsum(self.kv_len_arr_cpu[:bs], dim=0)
        wrapper.plan(
            self.qo_indptr_cpu[: bs + 1],
            self.kv_indptr_cpu[: bs + 1],
            kv_indices,
            self.kv_len_arr_cpu[:bs],
            updater.num_local_heads,
            updater.kv_lora_rank,
            updater.qk_rope_head_dim,
            1,
            False,
            updater.scaling,
            updater.data_type,
            updater.data_type,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata; replay refresh driven by a name->tensor dict, "local" entry aliased to the forward lengths
    # expect: SG203
    def refresh_from_dict(self, bs: int, forward_batch: "ForwardBatch"):
        lens_by_role = {
            "global": forward_batch.seq_lens[:bs],
            "local": forward_batch.seq_lens[:bs],
        }
        if not get_parallel().dcp_enabled:
            lens_by_role["global"] = None
        buffers = self.named()
        buffers["seq_lens_k"][:bs].copy_(lens_by_role["local"])
        if lens_by_role["global"] is not None:
            buffers["global_seq_lens_k"][:bs].copy_(lens_by_role["global"])


class RocmTRTLLMGraphBackend(TRTLLMMLABackend):
    """trtllm_mla with the vendor's graph-replay refresh."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata; override copies the whole decode lengths into metadata.seq_lens_k
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(self, bs, req_pool_indices, seq_lens, forward_mode, metadata):
        if forward_mode.is_target_verify() or forward_mode.is_draft_extend_v2():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        seq_lens = seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(seq_lens)
        metadata.seq_lens_k.copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(seq_lens),
        )


class RocmTRTLLMGraphBackendV2(TRTLLMMLABackend):
    """Second revision: keeps the upstream DCP refresh, own decode replay."""

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata_out_graph; decode replay refresh writes the localized lengths, other modes go to super()
    # expect: clean
    def init_forward_metadata_out_graph(self, forward_batch: "ForwardBatch", in_capture: bool = False):
        mode = forward_batch.forward_mode
        if in_capture or not mode.is_decode_or_idle() or not get_parallel().dcp_enabled:
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        metadata = self.decode_cuda_graph_metadata[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(seq_lens)
        local = self._get_dcp_local_seq_lens(seq_lens)
        metadata.seq_lens_k.copy_(local)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, forward_batch.req_pool_indices[:bs], local
        )
