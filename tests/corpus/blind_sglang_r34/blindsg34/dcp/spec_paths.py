"""Target-verify / draft-extend / multi-step draft paths of the cute-dsl DCP
port. Lengths arrive through the helpers in ``lens`` and the backend's
metadata."""

from __future__ import annotations

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import (
    CuteDslMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg34.dcp.cutedsl_mla_dcp import VendorCuteDslMLADcpBackend
from blindsg34.dcp.lens import (
    dcp_lens_for_spec,
    dcp_lens_for_spec_owner_fastpath,
    verify_global_lens,
)


class SpecDcpLauncher:
    def __init__(self, backend: VendorCuteDslMLADcpBackend):
        self.backend = backend
        self.num_draft_tokens = backend.num_draft_tokens

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify _run_decode_kernel call)
    # expect: SG203
    def run_target_verify(self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch):
        be = self.backend
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        metadata = be._metadata(forward_batch)
        global_lens = verify_global_lens(forward_batch.seq_lens[:bs], draft_token_num)
        local_lens = global_lens.clone()
        update_local_kv_lens_for_dcp(local_lens)
        query = q.to(be.data_type).view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = be._run_decode_kernel(
            query=query,
            kv_cache=be._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=be.dcp_world,
            cp_rank=be.dcp_rank,
            return_lse=True,
        )
        return be._finish(raw_out, lse, local_lens, bs, draft_token_num, layer)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify _run_decode_kernel call)
    # expect: clean
    def run_target_verify_localized(
        self, q: torch.Tensor, layer: RadixAttention, forward_batch: ForwardBatch
    ):
        be = self.backend
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        metadata = be._metadata(forward_batch)
        global_lens = verify_global_lens(forward_batch.seq_lens[:bs], draft_token_num)
        local_lens = global_lens.clone()
        update_local_kv_lens_for_dcp(local_lens)
        query = q.to(be.data_type).view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = be._run_decode_kernel(
            query=query,
            kv_cache=be._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=be.dcp_world,
            cp_rank=be.dcp_rank,
            return_lse=True,
        )
        return be._finish(raw_out, lse, local_lens, bs, draft_token_num, layer)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft-extend seq_lens_k / global_seq_lens_k)
    # expect: SG203
    def stage_draft_extend_metadata(self, forward_batch: ForwardBatch) -> None:
        lens = dcp_lens_for_spec_owner_fastpath(forward_batch, self.num_draft_tokens)
        metadata = self.backend.forward_decode_metadata
        metadata.seq_lens_k = lens.local
        metadata.global_seq_lens_k = lens.global_
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft-extend seq_lens_k / global_seq_lens_k)
    # expect: clean
    def stage_draft_extend_metadata_sharded(self, forward_batch: ForwardBatch) -> None:
        lens = dcp_lens_for_spec(forward_batch, self.num_draft_tokens)
        metadata = self.backend.forward_decode_metadata
        metadata.seq_lens_k = lens.local
        metadata.global_seq_lens_k = lens.global_
        forward_batch.decode_trtllm_mla_metadata = metadata


class CuteDslMLADcpMultiStepDraftBackend(CuteDslMLAMultiStepDraftBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata_out_graph
    # expect: SG203
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        if in_capture:
            return super().init_forward_metadata_out_graph(forward_batch, in_capture=True)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            metadata = backend.decode_cuda_graph_metadata[bs]
            metadata.global_seq_lens_k.copy_(global_lens)
            metadata.seq_lens_k.copy_(global_lens)
            backend._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                forward_batch.req_pool_indices[:bs],
                backend._get_dcp_local_seq_lens(global_lens),
            )


class CuteDslMLADcpMultiStepDraftBackendSharded(CuteDslMLAMultiStepDraftBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata_out_graph
    # expect: clean
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        if in_capture:
            return super().init_forward_metadata_out_graph(forward_batch, in_capture=True)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            metadata = backend.decode_cuda_graph_metadata[bs]
            local_lens = backend._get_dcp_local_seq_lens(global_lens)
            metadata.global_seq_lens_k.copy_(global_lens)
            metadata.seq_lens_k.copy_(local_lens)
            backend._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, forward_batch.req_pool_indices[:bs], local_lens
            )
