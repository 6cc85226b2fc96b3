"""DCP port of the CuteDSL MLA backend (the one FlashInfer kernel that takes
``enable_dcp`` / ``cp_world`` / ``cp_rank`` / ``causal_seqlens_kv_global``)."""

from __future__ import annotations

from typing import List

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.utils import is_flashinfer_available

from blindsg40.config.settings import DcpSettings
from blindsg40.dcp.lens import DcpLens, global_and_local, int32, local_max, to_local
from blindsg40.registry.core import register_dcp_backend

if is_flashinfer_available():
    import flashinfer


class DcpCuteDslMLABackend(CuteDslMLABackend):
    def __init__(self, model_runner, dcp: DcpSettings, **kwargs):
        super().__init__(model_runner, **kwargs)
        self.dcp = dcp

    @classmethod
    def from_server_args(cls, server_args, model_runner, **kwargs):
        return cls(model_runner, DcpSettings.from_server_args(server_args), **kwargs)

    def _merge_ready(self, raw_out, lse, local_seq_lens, layer, bs, q_per_req=1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        q_indptr = torch.arange(
            0, (bs + 1) * q_per_req, q_per_req, dtype=torch.int32, device=output.device
        )
        fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, q_per_req)
        return output.flatten(1), lse

    def _cp_kwargs(self):
        return {"cp_world": self.dcp.size, "cp_rank": self.dcp.rank, "return_lse": True}

    # expect: SG203
    def launch_decode(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.global_seq_lens_k[:bs],
            metadata.max_seq_len_k,
            layer,
            causal_seqs=metadata.seq_lens_k[:bs],
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)

    # expect: clean
    def launch_decode_ordered(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query,
            kv_cache,
            metadata.block_kv_indices,
            metadata.seq_lens_k[:bs],
            metadata.max_seq_len_k,
            layer,
            causal_seqs=metadata.global_seq_lens_k[:bs],
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)

    # expect: SG203
    def launch_draft_extend(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        q_per_req = q.shape[0] // bs
        query = q.view(bs, q_per_req, layer.tp_q_head_num, layer.head_dim)
        global_lens = forward_batch.seq_lens[:bs]
        local_lens = to_local(global_lens, self.dcp)
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices, global_lens, global_lens.device,
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=table,
            seq_lens=local_lens,
            max_seq_len=local_max(self.max_context_len, self.dcp),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_lens, layer, bs, q_per_req)

    # expect: clean
    def launch_draft_extend_bounded(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        q_per_req = q.shape[0] // bs
        query = q.view(bs, q_per_req, layer.tp_q_head_num, layer.head_dim)
        global_lens = int32(forward_batch.seq_lens[:bs])
        local_lens = to_local(global_lens, self.dcp)
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices, global_lens, global_lens.device,
        )
        raw_out, lse = self._run_decode_kernel(
            query,
            kv_cache,
            table,
            local_lens,
            local_max(self.max_context_len, self.dcp),
            layer,
            causal_seqs=global_lens,
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, local_lens, layer, bs, q_per_req)

    # expect: SG203
    def launch_verify_pair(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        local_lens, global_lens = global_and_local(forward_batch.seq_lens[:bs] + ndt, self.dcp)
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, self._calc_padded_blocks(self.max_context_len + ndt),
            forward_batch.req_pool_indices, global_lens, global_lens.device,
        )
        raw_out, lse = self._run_decode_kernel(
            query, kv_cache, table, local_lens,
            local_max(self.max_context_len + ndt, self.dcp), layer,
            causal_seqs=global_lens,
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, local_lens, layer, bs, ndt)

    # expect: clean
    def launch_verify_pair_ordered(self, q, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        global_lens, local_lens = global_and_local(forward_batch.seq_lens[:bs] + ndt, self.dcp)
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, self._calc_padded_blocks(self.max_context_len + ndt),
            forward_batch.req_pool_indices, global_lens, global_lens.device,
        )
        raw_out, lse = self._run_decode_kernel(
            query, kv_cache, table, local_lens,
            local_max(self.max_context_len + ndt, self.dcp), layer,
            causal_seqs=global_lens,
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, local_lens, layer, bs, ndt)

    # expect: SG203
    def launch_decode_lens(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        lens = DcpLens.from_global(forward_batch.seq_lens[:bs], self.max_context_len, self.dcp)
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices, lens.global_lens, lens.global_lens.device,
        )
        raw_out, lse = self._run_decode_kernel(
            query, kv_cache, table, lens.global_lens, lens.max_local, layer,
            causal_seqs=lens.global_lens,
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, lens.local_lens, layer, bs)

    # expect: clean
    def launch_decode_lens_local(self, query, kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        lens = DcpLens.from_global(forward_batch.seq_lens[:bs], self.max_context_len, self.dcp)
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, self._calc_padded_blocks(self.max_context_len),
            forward_batch.req_pool_indices, lens.global_lens, lens.global_lens.device,
        )
        raw_out, lse = self._run_decode_kernel(
            query, kv_cache, table, lens.local_lens, lens.max_local, layer,
            causal_seqs=lens.global_lens,
            **self._cp_kwargs(),
        )
        return self._merge_ready(raw_out, lse, lens.local_lens, layer, bs)

    # expect: SG203
    def launch_chain_steps(self, queries: List[torch.Tensor], kv_cache, layer, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        base = int32(forward_batch.seq_lens[:bs])
        table = self._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs,
            self._calc_padded_blocks(self.max_context_len + len(queries)),
            forward_batch.req_pool_indices, base + len(queries), base.device,
        )
        outputs = []
        for step, query in enumerate(queries):
            step_global = base + step + 1
            raw_out, lse = self._run_decode_kernel(
                query, kv_cache, table, step_global,
                local_max(self.max_context_len + step + 1, self.dcp), layer,
                causal_seqs=step_global,
                **self._cp_kwargs(),
            )
            outputs.append(self._merge_ready(raw_out, lse, to_local(step_global, self.dcp), layer, bs))
        return outputs


class DcpCuteDslMLALegacyInit(DcpCuteDslMLABackend):
    """Metadata hoist carried over from the 0.5.18 cute-dsl backend."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        if self.dcp.enabled and metadata is not None and (
            forward_batch.forward_mode.is_decode_or_idle()
            or forward_batch.forward_mode.is_target_verify()
        ):
            if metadata.seq_lens_k is not None:
                metadata.global_seq_lens_k = metadata.seq_lens_k
                metadata.seq_lens_k = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(metadata.max_seq_len_k)


class DcpCuteDslMLACurrentInit(DcpCuteDslMLABackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        if self.dcp.enabled and metadata is not None and metadata.seq_lens_k is not None:
            assert metadata.global_seq_lens_k is not None
            metadata.max_seq_len_k = max(metadata.max_seq_len_k, 1)


@register_dcp_backend("cutedsl_mla")
def create_cutedsl_mla_dcp(server_args, model_runner):
    return DcpCuteDslMLABackend.from_server_args(server_args, model_runner)
