"""Fork variants of the FlashInfer MLA backend's decode planning under DCP.

Upstream (``FlashInferMLAIndicesUpdaterDecode.call_begin_forward``) builds a
VIRTUAL read stream for the whole sequence and, with DCP on, shards it to
this rank with ``plan_dcp_decode_metadata`` before ``wrapper.plan``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp.layout import (
    filter_dcp_local_kv_indices,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.runtime_context import get_parallel


class ForkMLAIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    """Decode updater that drops the translator round-trip (static pool)."""

    def _build_read_stream(self, plan, req_pool_indices, paged_kernel_lens, kv_indptr, n):
        kv_indices = torch.empty(n, dtype=torch.int32, device="cuda")
        self.attn_backend.kv_index_translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=paged_kernel_lens,
            indptr=kv_indptr,
            out=kv_indices,
        )
        return kv_indices

    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._build_read_stream(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if get_parallel().dcp_enabled:
            # Keep only the pages this rank holds.
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
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

    # expect: SG203
    def plan_local_lens(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        kv_indices: torch.Tensor,
    ):
        bs = len(paged_kernel_lens)
        parallel = get_parallel()
        kv_lens = get_dcp_lens(
            paged_kernel_lens.to(torch.int32), parallel.dcp_size, parallel.dcp_rank
        )
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        wrapper.plan(
            self.q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
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

    # expect: clean
    def plan_local_lens_local_indptr(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        kv_indices: torch.Tensor,
    ):
        bs = len(paged_kernel_lens)
        parallel = get_parallel()
        kv_lens = get_dcp_lens(
            paged_kernel_lens.to(torch.int32), parallel.dcp_size, parallel.dcp_rank
        )
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(kv_lens, dim=0)
        wrapper.plan(
            self.q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
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

    # expect: clean
    def plan_or_delegate(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        *,
        plan,
        req_pool_indices: torch.Tensor,
    ):
        if get_parallel().dcp_enabled:
            return super().call_begin_forward(
                wrapper,
                paged_kernel_lens,
                paged_kernel_lens_sum,
                self.q_indptr,
                self.kv_indptr,
                plan=plan,
                req_pool_indices=req_pool_indices,
            )
        bs = len(paged_kernel_lens)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indices = self._build_read_stream(
            plan,
            req_pool_indices,
            paged_kernel_lens,
            kv_indptr[: bs + 1],
            paged_kernel_lens_sum,
        )
        wrapper.plan(
            self.q_indptr[: bs + 1],
            kv_indptr[: bs + 1],
            kv_indices,
            paged_kernel_lens.to(torch.int32),
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )


class ForkMLAIndicesUpdaterDecodeDcp(ForkMLAIndicesUpdaterDecode):
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens: torch.Tensor,
        paged_kernel_lens_sum: int,
        q_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        init_metadata_replay: bool = False,
        spec_info=None,
        *,
        plan,
        req_pool_indices: torch.Tensor,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self._build_read_stream(
            plan, req_pool_indices, paged_kernel_lens, kv_indptr, paged_kernel_lens_sum
        )
        if get_parallel().dcp_enabled:
            # Rewrites kv_lens / kv_indptr in place to this rank's share.
            plan_dcp_decode_metadata(
                kv_lens,
                kv_indptr,
                kv_indices,
                init_metadata_replay,
                fast_decode_kwargs,
                bs,
            )
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


class ForkFlashInferMLABackend(FlashInferMLAAttnBackend):
    """FlashInfer MLA with a fork-side direct decode plan."""

    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        config = model_runner.model_config
        self.num_local_heads = (
            config.num_attention_heads // get_parallel().attn_tp_size
        )
        self.kv_lora_rank = config.kv_lora_rank
        self.qk_rope_head_dim = config.qk_rope_head_dim
        self.scaling = config.scaling
        self.data_type = model_runner.dtype
        self.q_data_type = model_runner.dtype

    # expect: SG203
    def init_decode_metadata_direct(self, forward_batch):
        bs = forward_batch.batch_size
        num_heads = self.num_local_heads * get_parallel().attn_dcp_size
        kv_len_arr = forward_batch.seq_lens.to(torch.int32)
        self.kv_indptr[1 : bs + 1] = torch.cumsum(kv_len_arr, dim=0)
        plan_kwargs = {
            "qo_indptr": self.q_indptr_decode[: bs + 1],
            "kv_indptr": self.kv_indptr[: bs + 1],
            "kv_indices": forward_batch.spec_info.kv_indices
            if forward_batch.spec_info is not None
            else self.cuda_graph_kv_indices[: int(kv_len_arr.sum().item())],
            "kv_len_arr": kv_len_arr,
            "num_heads": num_heads,
            "head_dim_ckv": self.kv_lora_rank,
            "head_dim_kpe": self.qk_rope_head_dim,
            "page_size": 1,
            "causal": False,
            "sm_scale": self.scaling,
            "q_data_type": self.data_type,
            "kv_data_type": self.data_type,
        }
        self.decode_wrapper.plan(**plan_kwargs)

    # expect: clean
    def init_decode_metadata_updater(self, forward_batch):
        """Decode planning through the upstream updater (DCP-aware)."""
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        self.indices_updater_decode.update(
            forward_batch.seq_lens,
            forward_batch.seq_lens_sum,
            decode_wrapper=self.decode_wrapper,
            init_metadata_replay=False,
            req_pool_indices=forward_batch.req_pool_indices,
            plan=forward_batch.kv_loc_plan,
        )

    # expect: SG203
    def replay_decode_metadata(
        self, plan, bs: int, req_pool_indices, seq_lens, seq_lens_sum, seq_lens_cpu
    ):
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
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )

    # expect: clean
    def replay_decode_metadata_local(
        self, plan, bs: int, req_pool_indices, seq_lens, seq_lens_sum, seq_lens_cpu
    ):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
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
            req_pool_indices=req_pool_indices[:bs],
            plan=plan,
            **self.fast_decode_kwargs,
        )

    # expect: SG203
    def plan_decode_clamped(self, forward_batch, kv_indices: torch.Tensor):
        """Decode plan with lengths clamped to the context window."""
        bs = forward_batch.batch_size
        metadata_lens = torch.clamp(
            forward_batch.seq_lens[:bs], max=self.max_context_len
        ).to(torch.int32)
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(metadata_lens, dim=0)
        self.decode_wrapper.plan(
            self.q_indptr_decode[: bs + 1],
            kv_indptr,
            kv_indices,
            metadata_lens,
            self.num_local_heads * get_parallel().attn_dcp_size,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.scaling,
            self.data_type,
            self.data_type,
        )

    # expect: clean
    def plan_extend_gathered(self, forward_batch, sm_scale: Optional[float] = None):
        """Paged prefill over the DCP all-gathered KV buffer: the buffer holds
        every rank's share, so whole-sequence lengths are the right ones."""
        dcp_meta = forward_batch.attn_dcp_metadata
        if dcp_meta is None:
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_indptr = dcp_meta.dcp_kv_indptr
        qo_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=kv_indptr.device)
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        self.prefill_wrapper_paged.plan(
            qo_indptr,
            kv_indptr,
            dcp_meta.dcp_kv_indices,
            kv_indptr[1:] - kv_indptr[:-1],
            self.num_local_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            True,
            sm_scale if sm_scale is not None else self.scaling,
            self.q_data_type,
            self.data_type,
        )
