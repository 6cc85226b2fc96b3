"""Name-keyed construction of the DCP ports and a forward-mode keyed
attention front end for speculative runs."""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from blindsg40.config.settings import DcpSettings
from blindsg40.dcp import cutedsl_port, flashinfer_mla_port, trtllm_port  # noqa: F401  (registration)
from blindsg40.dcp.kernels import LaunchSettings, mla_decode
from blindsg40.dcp.lens import local_max, to_local
from blindsg40.registry.core import DCP_BACKENDS


def build_dcp_backend(server_args, model_runner):
    decode_backend = getattr(server_args, "decode_attention_backend", None) or getattr(
        server_args, "attention_backend", "trtllm_mla"
    )
    return DCP_BACKENDS.get(decode_backend)(server_args, model_runner)


class DcpSpecAttention:
    """Routes decode and target verify of one MLA layer to a kernel launch."""

    def __init__(self, backend: Any, settings: LaunchSettings):
        self.backend = backend
        self.dcp: DcpSettings = settings.dcp
        self.dims = settings.dims
        self._handlers: Dict[ForwardMode, Callable] = {
            ForwardMode.DECODE: self._decode,
            ForwardMode.TARGET_VERIFY: self._verify,
        }

    @classmethod
    def from_server_args(cls, server_args, model_runner):
        backend = build_dcp_backend(server_args, model_runner)
        return cls(backend, LaunchSettings.from_server_args(server_args, model_runner.model_config))

    def __call__(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        return self._handlers[forward_batch.forward_mode](q, kv_cache, layer, forward_batch)

    def _decode(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        return mla_decode(
            q, kv_cache, self.backend.workspace_buffer, self.dims,
            metadata.block_kv_indices, metadata.seq_lens_k[:bs], metadata.max_seq_len_k,
            self.backend._compute_decode_bmm1_scale(layer),
            backend="trtllm-gen", return_lse=True,
        )

    # expect: SG203
    def _verify(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        global_lens = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        local_lens = to_local(global_lens, self.dcp)
        max_blocks = self.backend._calc_padded_blocks(self.backend.max_context_len + ndt)
        table = self.backend._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, max_blocks,
            forward_batch.req_pool_indices, global_lens, global_lens.device,
        )
        return mla_decode(
            query, kv_cache, self.backend.workspace_buffer, self.dims,
            table, local_lens, local_max(self.backend.max_context_len + ndt, self.dcp),
            self.backend._compute_decode_bmm1_scale(layer),
            backend="trtllm-gen", return_lse=True,
        )
