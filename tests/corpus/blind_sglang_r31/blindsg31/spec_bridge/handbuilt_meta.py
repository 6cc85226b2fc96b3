"""Hand-built TRT-LLM MLA decode metadata for rollout probe batches.

The rollout probe skips the backend's ``init_forward_metadata`` and installs a
``TRTLLMMLADecodeMetadata`` directly on the batch; ``TRTLLMMLABackend``'s
decode reads ``forward_batch.decode_trtllm_mla_metadata`` first, and its DCP
path hands ``metadata.seq_lens_k`` to the kernel as this rank's lengths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode); hand-built decode metadata with seq_lens_k = forward_batch.seq_lens while DCP is on
# expect: SG203
def install_probe_decode_metadata(backend: "TRTLLMMLABackend", forward_batch: "ForwardBatch"):
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens.to(torch.int32)
    max_seq = backend.max_context_len
    block_kv_indices = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_seq),
        forward_batch.req_pool_indices,
        forward_batch.seq_lens,
        forward_batch.seq_lens.device,
    )
    metadata = TRTLLMMLADecodeMetadata(
        block_kv_indices=block_kv_indices,
        max_seq_len_k=max_seq,
        seq_lens_k=seq_lens,
    )
    if get_parallel().dcp_enabled:
        metadata.global_seq_lens_k = seq_lens
        metadata.max_seq_len_k = backend._get_dcp_local_max_seq_len(max_seq)
    metadata.batch_size = bs
    forward_batch.decode_trtllm_mla_metadata = metadata
    return metadata


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP hoist); hand-built decode metadata with the global lengths kept aside and seq_lens_k localized
# expect: clean
def install_probe_decode_metadata_dcp(backend: "TRTLLMMLABackend", forward_batch: "ForwardBatch"):
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens.to(torch.int32)
    max_seq = backend.max_context_len
    block_kv_indices = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_seq),
        forward_batch.req_pool_indices,
        forward_batch.seq_lens,
        forward_batch.seq_lens.device,
    )
    metadata = TRTLLMMLADecodeMetadata(
        block_kv_indices=block_kv_indices,
        max_seq_len_k=max_seq,
        seq_lens_k=seq_lens,
    )
    parallel = get_parallel()
    if parallel.dcp_enabled:
        metadata.global_seq_lens_k = seq_lens
        metadata.seq_lens_k = get_dcp_lens(
            seq_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        metadata.max_seq_len_k = backend._get_dcp_local_max_seq_len(max_seq)
    metadata.batch_size = bs
    forward_batch.decode_trtllm_mla_metadata = metadata
    return metadata
