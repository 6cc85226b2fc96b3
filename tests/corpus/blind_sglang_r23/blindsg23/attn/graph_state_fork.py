"""DCP decode lengths kept on the backend across methods.

The capture-stable length buffers are allocated in ``init_cuda_graph_state``,
refreshed in ``init_forward_metadata_out_graph`` (capture and replay) and read
by ``forward_decode``; the eager path keeps its step lengths in
``init_forward_metadata``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg23.attn.mla_fork_base import ForkTRTLLMMLABase


class _GraphLensBackendBase(ForkTRTLLMMLABase):
    def init_cuda_graph_state(
        self,
        max_bs: int,
        max_num_tokens: int,
        kv_indices_buf: Optional[torch.Tensor] = None,
    ):
        super().init_cuda_graph_state(max_bs, max_num_tokens, kv_indices_buf)
        self.graph_global_lens = torch.zeros((max_bs,), dtype=torch.int32, device=self.device)
        self.graph_local_lens = torch.zeros((max_bs,), dtype=torch.int32, device=self.device)
        self.graph_bs = -1

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        if not forward_batch.forward_mode.is_decode_or_idle():
            return
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        self.graph_global_lens[:bs].copy_(seq_lens)
        self.graph_local_lens[:bs].copy_(self._get_dcp_local_seq_lens(seq_lens))
        self.graph_bs = bs

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        # Eager step: the capture-stable buffers are not this batch's.
        self.graph_bs = -1
        super().init_forward_metadata(forward_batch)

    def _graph_decode_ready(self, forward_batch: ForwardBatch, llama_4_scaling) -> bool:
        return (
            get_parallel().dcp_enabled
            and self.data_type == torch.bfloat16
            and llama_4_scaling is None
            and forward_batch.forward_mode.is_decode_or_idle()
            and getattr(self, "graph_bs", -1) == forward_batch.batch_size
        )


class GraphDcpDecodeBackend(_GraphLensBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata + forward_decode (capture-stable lens)
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
        if not self._graph_decode_ready(forward_batch, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self.decode_cuda_graph_metadata[bs]
        raw_out, lse = self._launch_mla(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            self.graph_global_lens[:bs],
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, self.graph_local_lens[:bs], layer, bs)


class GraphDcpDecodeBackendLocal(_GraphLensBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata + forward_decode (rank-local buffer)
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
        if not self._graph_decode_ready(forward_batch, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self.decode_cuda_graph_metadata[bs]
        raw_out, lse = self._launch_mla(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            self.graph_local_lens[:bs],
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, self.graph_local_lens[:bs], layer, bs)


class _EagerStepLensBackendBase(ForkTRTLLMMLABase):
    """Eager DCP decode: the step's lengths are computed once per step in
    ``init_forward_metadata`` and every MLA layer's ``forward_decode`` launches
    with them."""

    def __init__(self, model_runner, **kwargs):
        super().__init__(model_runner, **kwargs)
        self._step_kv_lens: Optional[torch.Tensor] = None

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        # Graph capture / replay keep their lengths in the captured metadata.
        self._step_kv_lens = None
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)

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
            self._step_kv_lens is None
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        query = self._write_kv_and_build_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self._decode_metadata(forward_batch)
        raw_out, lse = self._launch_mla(
            query,
            self._kv_cache_view(layer),
            metadata.block_kv_indices,
            self._step_kv_lens,
            metadata.max_seq_len_k,
            layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, self._step_kv_lens, layer, bs)


class EagerStepLensBackend(_EagerStepLensBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (per-step hoisted lens)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._step_kv_lens = None
        if not (
            get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode()
        ):
            return
        bs = forward_batch.batch_size
        # One int32 conversion per step instead of one per MLA layer.
        self._step_kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)


class EagerStepLensBackendLocal(_EagerStepLensBackendBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (rank-local view derived once per step)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._step_kv_lens = None
        if not (
            get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode()
        ):
            return
        bs = forward_batch.batch_size
        self._step_kv_lens = self._get_dcp_local_seq_lens(
            forward_batch.seq_lens[:bs].to(torch.int32)
        )
