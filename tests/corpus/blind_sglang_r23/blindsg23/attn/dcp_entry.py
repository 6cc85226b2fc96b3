"""Module-level DCP decode entries used by the fork's fused MLA layer
(``models`` call these directly instead of going through RadixAttention)."""

from __future__ import annotations

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg23.common.config import DcpTopology
from blindsg23.common.dcp_lens import launch_trtllm_mla, lens_as_i32, local_kv_lens


def _decode_block_table(backend: TRTLLMMLABackend, forward_batch: ForwardBatch):
    metadata = (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )
    return metadata.block_kv_indices, metadata.max_seq_len_k


# idiom: models/deepseek_common/attention_forward_methods (rank-local (out, lse) for the DCP merge) -> trtllm_batch_decode_with_kv_cache_mla
# expect: SG203
def dcp_decode_entry(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: ForwardBatch,
    layer,
):
    topo = DcpTopology.current()
    if not topo.enabled:
        raise ValueError("dcp_decode_entry is only wired for decode context parallel")
    block_tables, max_seq_len = _decode_block_table(backend, forward_batch)
    kv_lens = lens_as_i32(forward_batch)
    raw_out, lse = launch_trtllm_mla(
        backend,
        query,
        kv_cache,
        block_tables,
        kv_lens,
        max_seq_len,
        layer,
        return_lse=True,
    )
    return raw_out.flatten(1), lse


# idiom: models/deepseek_common/attention_forward_methods (rank-local (out, lse)) + layers/dcp/layout.py get_dcp_lens
# expect: clean
def dcp_decode_entry_local(
    backend: TRTLLMMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: ForwardBatch,
    layer,
):
    topo = DcpTopology.current()
    if not topo.enabled:
        raise ValueError("dcp_decode_entry_local is only wired for decode context parallel")
    block_tables, max_seq_len = _decode_block_table(backend, forward_batch)
    kv_lens = local_kv_lens(lens_as_i32(forward_batch), topo)
    raw_out, lse = launch_trtllm_mla(
        backend,
        query,
        kv_cache,
        block_tables,
        kv_lens,
        max_seq_len,
        layer,
        return_lse=True,
    )
    return raw_out.flatten(1), lse
