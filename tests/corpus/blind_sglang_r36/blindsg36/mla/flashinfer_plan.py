"""FlashInfer MLA wrapper planning under DCP (BatchMLAPagedAttentionWrapper.plan
and the MLAPlanMetadata object form of FlashInfer 0.7.4)."""

from __future__ import annotations

from typing import Dict, Optional

import torch
from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from .lens import MLA_CFG, localize_inplace_, local_lens_py


class LabIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Eager decode planning; spec (draft) inputs go to the parent."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: SG203
    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                           kv_indptr, init_metadata_replay=False, spec_info=None, *, plan,
                           req_pool_indices, **fast_decode_kwargs):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        if get_parallel().dcp_enabled:
            # Keep the caller's lengths intact (the tracer logs them); the
            # local copy is for the occupancy histogram.
            local_kv_lens = kv_lens.clone()
            update_local_kv_lens_for_dcp(local_kv_lens)
            self._last_local_kv_lens = local_kv_lens
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class LabIndicesUpdaterDecodeV2(FlashInferMLAIndicesUpdaterDecode):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAIndicesUpdaterDecode.call_begin_forward
    # expect: clean
    def call_begin_forward(self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr,
                           kv_indptr, init_metadata_replay=False, spec_info=None, *, plan,
                           req_pool_indices, **fast_decode_kwargs):
        if spec_info is not None or init_metadata_replay:
            return super().call_begin_forward(
                wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
                init_metadata_replay, spec_info, plan=plan,
                req_pool_indices=req_pool_indices, **fast_decode_kwargs,
            )
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        translator = self.attn_backend.kv_index_translator
        is_translated = translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        n_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr / kv_indices in place to this
            # rank's share.
            n_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, False, fast_decode_kwargs, bs
            )
        if not is_translated and n_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        wrapper.plan(
            q_indptr,
            kv_indptr,
            kv_indices,
            kv_lens,
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


# idiom: flashinfer 0.7.4 mla BatchMLAPagedAttentionWrapper.plan(metadata=MLAPlanMetadata.csr(...)) / FlashInferMLAIndicesUpdaterDecode.call_begin_forward
# expect: SG203
def plan_mla_decode_with_metadata_v2(
    wrapper: BatchMLAPagedAttentionWrapper,
    seq_lens: torch.Tensor,
    kv_indices: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    dtype: torch.dtype,
    page_size: int = 1,
    dcp_size: Optional[int] = None,
    use_profiler: bool = False,
):
    p = get_parallel()
    dcp_size = dcp_size or p.attn_dcp_size
    bs = seq_lens.shape[0]
    qo_indptr = torch.arange(0, bs + 1, dtype=torch.int32, device=seq_lens.device)
    kv_len_arr = seq_lens.to(torch.int32)
    kv_indptr = torch.nn.functional.pad(torch.cumsum(kv_len_arr, 0, dtype=torch.int32), (1, 0))
    metadata = MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr)
    wrapper.plan(
        metadata=metadata,
        # DCP all-gathers the query heads across the group.
        num_heads=num_heads * dcp_size,
        head_dim_ckv=kv_lora_rank,
        head_dim_kpe=qk_rope_head_dim,
        page_size=page_size,
        causal=False,
        sm_scale=sm_scale,
        q_data_type=dtype,
        kv_data_type=dtype,
        use_profiler=use_profiler,
        lse_mode="basee" if dcp_size > 1 else "none",
    )
    return metadata


# idiom: flashinfer 0.7.4 mla BatchMLAPagedAttentionWrapper.plan(metadata=MLAPlanMetadata.csr(...)) / FlashInferMLAIndicesUpdaterDecode.call_begin_forward
# expect: clean
def plan_mla_decode_with_metadata(
    wrapper: BatchMLAPagedAttentionWrapper,
    seq_lens: torch.Tensor,
    kv_indices: torch.Tensor,
    *,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    dtype: torch.dtype,
    page_size: int = 1,
    use_profiler: bool = False,
):
    p = get_parallel()
    dcp_size = p.attn_dcp_size
    bs = seq_lens.shape[0]
    qo_indptr = torch.arange(0, bs + 1, dtype=torch.int32, device=seq_lens.device)
    kv_len_arr = seq_lens.to(torch.int32)
    kv_indptr = torch.nn.functional.pad(torch.cumsum(kv_len_arr, 0, dtype=torch.int32), (1, 0))
    if p.dcp_enabled:
        # In place: kv_len_arr / kv_indptr become this rank's lengths, and
        # this rank's slots are compacted to the front of kv_indices.
        n = plan_dcp_decode_metadata(kv_len_arr, kv_indptr, kv_indices, False, {}, bs)
        kv_indices = kv_indices[:n]
    metadata = MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_len_arr)
    wrapper.plan(
        metadata=metadata,
        num_heads=num_heads * dcp_size,
        head_dim_ckv=kv_lora_rank,
        head_dim_kpe=qk_rope_head_dim,
        page_size=page_size,
        causal=False,
        sm_scale=sm_scale,
        q_data_type=dtype,
        kv_data_type=dtype,
        use_profiler=use_profiler,
        lse_mode="basee" if dcp_size > 1 else "none",
    )
    return metadata


# idiom: flashinfer 0.7.4 mla BatchMLAPagedAttentionWrapper.plan(metadata=MLAPlanMetadata.dense(...)) / FlashInferMLAAttnBackend.init_forward_metadata (target verify)
# expect: SG203
def plan_dense_for_verify(
    wrapper: BatchMLAPagedAttentionWrapper,
    forward_batch: ForwardBatch,
    block_tables: torch.Tensor,
    *,
    draft_token_num: int,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    dtype: torch.dtype,
    page_size: int = 64,
):
    assert forward_batch.forward_mode.is_target_verify()
    p = get_parallel()
    bs = forward_batch.batch_size
    glob = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
    seq_lens = (
        get_dcp_lens(glob, p.dcp_size, p.dcp_rank).to(torch.int32) if p.dcp_enabled else glob
    )
    cum_q = torch.arange(
        0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=glob.device
    )
    metadata = MLAPlanMetadata.dense(
        cum_seq_lens_q=cum_q,
        block_tables=block_tables[:bs],
        seq_lens=seq_lens,
        max_q_len=draft_token_num,
    )
    wrapper.plan(
        metadata=metadata,
        num_heads=num_heads,
        head_dim_ckv=kv_lora_rank,
        head_dim_kpe=qk_rope_head_dim,
        page_size=page_size,
        causal=True,
        sm_scale=sm_scale,
        q_data_type=dtype,
        kv_data_type=dtype,
        lse_mode="basee" if p.dcp_enabled else "none",
    )
    return metadata


# idiom: flashinfer 0.7.4 mla BatchMLAPagedAttentionWrapper.plan(metadata=MLAPlanMetadata.dense(...)) / FlashInferMLAAttnBackend.init_forward_metadata (target verify)
# expect: clean
def plan_dense_for_verify_v2(
    wrapper: BatchMLAPagedAttentionWrapper,
    forward_batch: ForwardBatch,
    block_tables: torch.Tensor,
    *,
    draft_token_num: int,
    num_heads: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    sm_scale: float,
    dtype: torch.dtype,
    page_size: int = 64,
):
    assert forward_batch.forward_mode.is_target_verify()
    p = get_parallel()
    if p.dcp_enabled:
        # The wrapper's plan has no per-request global causal bound, so a
        # multi-token verify on a cyclic shard would mask the wrong keys.
        raise NotImplementedError(
            "flashinfer MLA wrapper target verify with DCP: use cutedsl_mla"
        )
    bs = forward_batch.batch_size
    seq_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
    cum_q = torch.arange(
        0, (bs + 1) * draft_token_num, draft_token_num, dtype=torch.int32, device=seq_lens.device
    )
    metadata = MLAPlanMetadata.dense(
        cum_seq_lens_q=cum_q,
        block_tables=block_tables[:bs],
        seq_lens=seq_lens,
        max_q_len=draft_token_num,
    )
    wrapper.plan(
        metadata=metadata,
        num_heads=num_heads,
        head_dim_ckv=kv_lora_rank,
        head_dim_kpe=qk_rope_head_dim,
        page_size=page_size,
        causal=True,
        sm_scale=sm_scale,
        q_data_type=dtype,
        kv_data_type=dtype,
    )
    return metadata


class LabFlashInferMLABackend(FlashInferMLAAttnBackend):
    """Decode-graph replay with host-built fast-plan arrays."""

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata
    # expect: SG203
    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                   forward_mode, spec_info, seq_lens_cpu, in_capture=False):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (decode, host fast plan)
    # expect: SG203
    def init_decode_fast_host(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        p = get_parallel()
        lens_cpu = forward_batch.seq_lens_cpu[:bs].tolist()
        kv_len_list = [int(l) for l in lens_cpu]
        kv_len_arr_cpu = torch.tensor(kv_len_list, dtype=torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
        kv_indices = self._lab_read_ids(forward_batch, bs)
        if p.dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        u = self.indices_updater_decode
        self.decode_wrapper.plan(
            qo_indptr_cpu,
            kv_indptr_cpu,
            kv_indices,
            kv_len_arr_cpu,
            u.num_local_heads,
            u.kv_lora_rank,
            u.qk_rope_head_dim,
            1,
            False,
            u.scaling,
            u.data_type,
            u.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)

    def _lab_read_ids(self, forward_batch: ForwardBatch, bs: int) -> torch.Tensor:
        seq_lens = forward_batch.seq_lens[:bs]
        indptr = torch.nn.functional.pad(torch.cumsum(seq_lens, 0, dtype=torch.int32), (1, 0))
        out = torch.empty(int(forward_batch.seq_lens_cpu[:bs].sum()), dtype=torch.int32,
                          device=seq_lens.device)
        self.kv_index_translator.pack_read_stream(
            forward_batch.kv_loc_plan,
            req_pool_indices=forward_batch.req_pool_indices[:bs],
            seq_lens=seq_lens,
            indptr=indptr,
            out=out,
        )
        return out


class LabFlashInferMLABackendV2(LabFlashInferMLABackend):
    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend._apply_cuda_graph_metadata
    # expect: clean
    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                   forward_mode, spec_info, seq_lens_cpu, in_capture=False):
        if not forward_mode.is_decode_or_idle():
            return FlashInferMLAAttnBackend._apply_cuda_graph_metadata(
                self, plan, bs, req_pool_indices, seq_lens, seq_lens_sum, forward_mode,
                spec_info, seq_lens_cpu, in_capture=in_capture,
            )
        assert seq_lens_cpu is not None
        kv_len_arr_cpu = localize_inplace_(seq_lens_cpu[:bs].to(torch.int32))
        self.cuda_graph_kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.fast_decode_kwargs.update(
            {
                "qo_indptr_cpu": self.cuda_graph_qo_indptr_cpu[: bs + 1],
                "kv_indptr_cpu": self.cuda_graph_kv_indptr_cpu[: bs + 1],
                "kv_len_arr_cpu": kv_len_arr_cpu,
            }
        )
        self.indices_updater_decode.update(
            seq_lens[:bs],
            seq_lens_sum,
            decode_wrapper=self.decode_cuda_graph_metadata[bs],
            init_metadata_replay=True,
            spec_info=spec_info,
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )

    # idiom: sglang/srt/layers/attention/flashinfer_mla_backend.py FlashInferMLAAttnBackend.init_forward_metadata (decode, host fast plan)
    # expect: clean
    def init_decode_fast_host(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        p = get_parallel()
        lens_cpu = forward_batch.seq_lens_cpu[:bs].tolist()
        kv_len_list = (
            local_lens_py(lens_cpu, p.dcp_size, p.dcp_rank)
            if p.dcp_enabled
            else [int(l) for l in lens_cpu]
        )
        kv_len_arr_cpu = torch.tensor(kv_len_list, dtype=torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        kv_indptr_cpu[1:] = torch.cumsum(kv_len_arr_cpu, dim=0)
        qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
        kv_indices = self._lab_read_ids(forward_batch, bs)
        if p.dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
            kv_indices = self.kv_index_translator.translate_dcp_read_ids(kv_indices)
        u = self.indices_updater_decode
        self.decode_wrapper.plan(
            qo_indptr_cpu,
            kv_indptr_cpu,
            kv_indices,
            kv_len_arr_cpu,
            u.num_local_heads,
            u.kv_lora_rank,
            u.qk_rope_head_dim,
            1,
            False,
            u.scaling,
            u.data_type,
            u.data_type,
        )
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)
