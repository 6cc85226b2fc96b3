"""FlashInfer MLA wrapper plans for the DCP decode port.

The planner owns the ``BatchMLAPagedAttentionWrapper.plan`` calls for decode,
graph replay, multi-step draft, verify and gathered-prefix extend. Under DCP
the decode wrapper walks this rank's KV slice only, so its ``kv_len_arr`` /
``kv_indptr`` / ``kv_indices`` must describe that slice.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from sglang.srt.layers.attention.flashinfer_mla_backend import (
    DecodeMetadata,
    FlashInferMLAAttnBackend,
    FlashInferMLAIndicesUpdaterDecode,
)
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg28.kernels import kernels, lens


class ForkMLADecodePlanner:
    def __init__(self, attn_backend: FlashInferMLAAttnBackend, model_runner):
        cfg = model_runner.model_config
        parallel = get_parallel()
        self.attn_backend = attn_backend
        self.translator = attn_backend.kv_index_translator
        # Decode attends with the DCP-gathered query: attn_dcp_size x heads.
        self.num_heads = (
            cfg.num_attention_heads // parallel.attn_tp_size * parallel.attn_dcp_size
        )
        self.num_prefill_heads = cfg.num_attention_heads // parallel.attn_tp_size
        self.kv_lora_rank = cfg.kv_lora_rank
        self.qk_rope_head_dim = cfg.qk_rope_head_dim
        self.sm_scale = cfg.scaling
        self.dtype = model_runner.dtype
        self.kv_indptr = attn_backend.kv_indptr
        self.q_indptr = attn_backend.q_indptr_decode
        self.kv_indptr_cpu = self.kv_indptr.to("cpu")
        self.q_indptr_cpu = self.q_indptr.to("cpu")
        self.graph_kv_indices: Optional[torch.Tensor] = None

    # ---- unlabelled plumbing ----
    def _dims(self, causal: bool = False, prefill: bool = False) -> dict:
        return {
            "num_heads": self.num_prefill_heads if prefill else self.num_heads,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "sm_scale": self.sm_scale,
            "q_data_type": self.dtype,
            "kv_data_type": self.dtype,
            "causal": causal,
        }

    def _pack(self, plan, req_pool_indices, seq_lens, kv_indptr, out) -> bool:
        return self.translator.pack_read_stream(
            plan,
            req_pool_indices=req_pool_indices,
            seq_lens=seq_lens,
            indptr=kv_indptr,
            out=out,
        )

    def _translate(self, kv_indices: torch.Tensor, n_ids: int, translated: bool):
        if not translated and n_ids > 0 and self.translator.needs_read_translate:
            valid = kv_indices[:n_ids]
            valid.copy_(self.translator.translate_dcp_read_ids(valid))

    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward, twist: fork planner shards (lens, indptr, ids) in place with plan_dcp_decode_metadata before the plan helper
    # expect: clean
    def plan_decode(self, wrapper, forward_batch: ForwardBatch):
        seq_lens = forward_batch.seq_lens
        bs = len(seq_lens)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        translated = self._pack(
            forward_batch.kv_loc_plan, forward_batch.req_pool_indices, seq_lens,
            kv_indptr, kv_indices,
        )
        kv_lens = seq_lens.to(torch.int32)
        n_ids = forward_batch.seq_lens_sum
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
        self._translate(kv_indices, n_ids, translated)
        kernels.plan_mla_wrapper(
            wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens,
            **self._dims(),
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend._build_fast_verify_plan_kwargs (host-side indptr / lens), twist: a sync-free decode plan built from seq_lens_cpu that never shards for DCP
    # expect: SG203
    def plan_decode_fast(self, wrapper, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        kv_len_cpu = forward_batch.seq_lens_cpu[:bs].to(torch.int32)
        kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
        torch.cumsum(kv_len_cpu, dim=0, out=kv_indptr_cpu[1:])
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr.copy_(kv_indptr_cpu, non_blocking=True)
        n_ids = int(kv_indptr_cpu[-1])
        kv_indices = torch.empty(
            n_ids, dtype=torch.int32, device=forward_batch.seq_lens.device
        )
        translated = self._pack(
            forward_batch.kv_loc_plan, forward_batch.req_pool_indices,
            forward_batch.seq_lens[:bs], kv_indptr, kv_indices,
        )
        self._translate(kv_indices, n_ids, translated)
        kernels.plan_mla_wrapper(
            wrapper, self.q_indptr_cpu[: bs + 1], kv_indptr_cpu, kv_indices,
            kv_len_cpu, **self._dims(),
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward, twist: plan arguments collected in a kwargs dict up front; the DCP branch rebinds locals the dict never sees
    # expect: SG203
    def plan_decode_from_kwargs(self, wrapper, forward_batch: ForwardBatch):
        seq_lens = forward_batch.seq_lens
        bs = len(seq_lens)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        translated = self._pack(
            forward_batch.kv_loc_plan, forward_batch.req_pool_indices, seq_lens,
            kv_indptr, kv_indices,
        )
        self._translate(kv_indices, forward_batch.seq_lens_sum, translated)
        kv_lens = seq_lens.to(torch.int32)
        plan_kwargs = {
            "qo_indptr": self.q_indptr[: bs + 1],
            "kv_indptr": kv_indptr,
            "kv_indices": kv_indices,
            "kv_len_arr": kv_lens,
        }
        if get_parallel().dcp_enabled:
            kv_lens = lens.local_lens(kv_lens)
            kv_indptr = torch.zeros_like(kv_indptr)
            kv_indptr[1:] = torch.cumsum(kv_lens, dim=0)
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        kernels.plan_mla_wrapper(wrapper, **plan_kwargs, **self._dims())

    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend._apply_cuda_graph_metadata (decode replay fast plan), twist: the replay refresh rebuilds kv_len_arr_cpu / indptr without update_local_kv_lens_for_dcp
    # expect: SG203
    def plan_decode_replay(self, wrapper, bs, req_pool_indices, seq_lens, seq_lens_cpu, plan):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        self.kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        self.kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens[:bs], dim=0)
        kv_indices = self.graph_kv_indices
        translated = self._pack(
            plan, req_pool_indices[:bs], seq_lens[:bs], self.kv_indptr[: bs + 1],
            kv_indices,
        )
        self._translate(kv_indices, int(kv_len_arr_cpu.sum()), translated)
        wrapper.plan(
            self.q_indptr_cpu[: bs + 1],
            self.kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            self.num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.sm_scale,
            self.dtype,
            self.dtype,
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend._apply_cuda_graph_metadata, twist: the replay refresh localizes the host arrays with update_local_kv_lens_for_dcp and compacts the ids in replay mode
    # expect: clean
    def plan_decode_replay_local(self, wrapper, bs, req_pool_indices, seq_lens, seq_lens_cpu, plan):
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
        self.kv_indptr_cpu[1 : bs + 1] = torch.cumsum(kv_len_arr_cpu, dim=0)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens[:bs], dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = self.graph_kv_indices
        translated = self._pack(plan, req_pool_indices[:bs], seq_lens[:bs], kv_indptr, kv_indices)
        n_ids = int(kv_len_arr_cpu.sum())
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(
                seq_lens[:bs].to(torch.int32),
                kv_indptr,
                kv_indices,
                True,
                {"kv_len_arr_cpu": kv_len_arr_cpu},
                bs,
            )
        self._translate(kv_indices, n_ids, translated)
        wrapper.plan(
            self.q_indptr_cpu[: bs + 1],
            self.kv_indptr_cpu[: bs + 1],
            kv_indices,
            kv_len_arr_cpu,
            self.num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.sm_scale,
            self.dtype,
            self.dtype,
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAMultiStepDraftBackend.common_template, twist: loop over per-step wrappers, step i planned on seq_lens + i without DCP sharding
    # expect: SG203
    def plan_multi_step(self, wrappers: Sequence, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        for i, wrapper in enumerate(wrappers):
            step_lens = forward_batch.seq_lens[:bs] + i
            kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=step_lens.device)
            kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
            n_ids = forward_batch.seq_lens_sum + i * bs
            kv_indices = torch.empty(n_ids, dtype=torch.int32, device=step_lens.device)
            translated = self._pack(
                forward_batch.kv_loc_plan, forward_batch.req_pool_indices, step_lens,
                kv_indptr, kv_indices,
            )
            self._translate(kv_indices, n_ids, translated)
            kernels.plan_mla_wrapper(
                wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices,
                step_lens.to(torch.int32), **self._dims(),
            )

    # idiom: flashinfer_mla_backend.FlashInferMLAMultiStepDraftBackend.common_template, twist: each step's triple is sharded through plan_dcp_decode_metadata inside the loop
    # expect: clean
    def plan_multi_step_local(self, wrappers: Sequence, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        dcp = get_parallel().dcp_enabled
        for i, wrapper in enumerate(wrappers):
            step_lens = forward_batch.seq_lens[:bs] + i
            kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=step_lens.device)
            kv_indptr[1:] = torch.cumsum(step_lens, dim=0)
            n_ids = forward_batch.seq_lens_sum + i * bs
            kv_indices = torch.empty(n_ids, dtype=torch.int32, device=step_lens.device)
            translated = self._pack(
                forward_batch.kv_loc_plan, forward_batch.req_pool_indices, step_lens,
                kv_indptr, kv_indices,
            )
            kv_lens = step_lens.to(torch.int32)
            if dcp:
                n_ids = plan_dcp_decode_metadata(kv_lens, kv_indptr, kv_indices, False, {}, bs)
            self._translate(kv_indices, n_ids, translated)
            kernels.plan_mla_wrapper(
                wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens,
                **self._dims(),
            )

    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (dcp_kv_indptr / dcp_kv_indices), twist: the paged prefill plan uses whole-sequence lengths because it indexes the all-gathered dcp_kv_buffer, not this rank's slice
    # expect: clean
    def plan_extend_gathered(self, wrapper, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        qo_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=seq_lens.device)
        qo_indptr[1:] = torch.cumsum(forward_batch.extend_seq_lens, dim=0)
        dcp_md = forward_batch.attn_dcp_metadata
        if get_parallel().dcp_enabled:
            if dcp_md is None or dcp_md.dcp_kv_indptr is None:
                raise RuntimeError(
                    "DCP extend needs attn_dcp_metadata (gathered prefix buffer)"
                )
            # forward_extend reads k_buf = dcp_kv_buffer, which holds every
            # rank's prefix rows plus this step's extend rows.
            kv_indptr, kv_indices = dcp_md.dcp_kv_indptr, dcp_md.dcp_kv_indices
        else:
            kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=seq_lens.device)
            kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
            kv_indices = torch.empty(
                forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
            )
            translated = self._pack(
                forward_batch.kv_loc_plan, forward_batch.req_pool_indices, seq_lens,
                kv_indptr, kv_indices,
            )
            self._translate(kv_indices, forward_batch.seq_lens_sum, translated)
        kv_len_arr = kv_indptr[1:] - kv_indptr[:-1]
        kernels.plan_mla_wrapper(
            wrapper, qo_indptr, kv_indptr, kv_indices, kv_len_arr,
            **self._dims(causal=True, prefill=True),
        )

    # idiom: dcp.planner.plan_dcp_decode_metadata, twist: sharding reached through lens.localize_plan_inputs in another module
    # expect: clean
    def plan_decode_via_helper(self, wrapper, forward_batch: ForwardBatch):
        seq_lens = forward_batch.seq_lens
        bs = len(seq_lens)
        kv_indptr = self.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        translated = self._pack(
            forward_batch.kv_loc_plan, forward_batch.req_pool_indices, seq_lens,
            kv_indptr, kv_indices,
        )
        kv_lens = seq_lens.to(torch.int32)
        n_ids = lens.localize_plan_inputs(kv_lens, kv_indptr, kv_indices, bs)
        self._translate(kv_indices, n_ids, translated)
        kernels.plan_mla_wrapper(
            wrapper, self.q_indptr[: bs + 1], kv_indptr, kv_indices, kv_lens,
            **self._dims(),
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward (0.5.6-era DCP port), twist: only the ids are filtered to this rank; indptr and kv_len_arr keep the whole-sequence lengths
    # expect: SG203
    def plan_decode_indices_only(self, wrapper, forward_batch: ForwardBatch):
        seq_lens = forward_batch.seq_lens
        bs = len(seq_lens)
        kv_indptr = self.kv_indptr
        kv_indptr[1 : bs + 1] = torch.cumsum(seq_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = torch.empty(
            forward_batch.seq_lens_sum, dtype=torch.int32, device=seq_lens.device
        )
        self._pack(
            forward_batch.kv_loc_plan, forward_batch.req_pool_indices, seq_lens,
            kv_indptr, kv_indices,
        )
        if get_parallel().dcp_enabled:
            kv_indices = self.translator.translate_dcp_read_ids(
                filter_dcp_local_kv_indices(kv_indices)
            )
        wrapper.plan(
            self.q_indptr[: bs + 1],
            kv_indptr,
            kv_indices,
            seq_lens.to(torch.int32),
            self.num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            1,
            False,
            self.sm_scale,
            self.dtype,
            self.dtype,
        )

    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterPrefill.call_begin_forward (target verify via spec_info.generate_attn_arg_prefill), twist: the fork plans the gathered-head verify wrapper with the whole-sequence kv_indptr under DCP
    # expect: SG203
    def plan_verify(self, wrapper, forward_batch: ForwardBatch):
        spec_info = forward_batch.spec_info
        kv_indices, kv_indptr, qo_indptr, _custom_mask = spec_info.generate_attn_arg_prefill(
            req_pool_indices=forward_batch.req_pool_indices,
            paged_kernel_lens=forward_batch.seq_lens,
            paged_kernel_lens_sum=forward_batch.seq_lens_sum,
            translator=self.translator,
            plan=forward_batch.kv_loc_plan,
        )
        kv_len_arr = kv_indptr[1:] - kv_indptr[:-1]
        heads = self.num_heads if get_parallel().dcp_enabled else self.num_prefill_heads
        kernels.plan_mla_wrapper(
            wrapper, qo_indptr, kv_indptr, kv_indices, kv_len_arr,
            num_heads=heads,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            sm_scale=self.sm_scale,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
            causal=True,
        )


class ForkFlashInferMLADcpBackend(FlashInferMLAAttnBackend):
    last_planned_bs: int = 0

    # idiom: flashinfer_mla_backend.FlashInferMLAAttnBackend.init_forward_metadata, twist: the fork hands whole-sequence seq_lens to the upstream decode updater, whose call_begin_forward shards them for DCP
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
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
        self.forward_metadata = DecodeMetadata(self.decode_wrapper)
        self.last_planned_bs = forward_batch.batch_size


class ForkIndicesUpdaterDecode(FlashInferMLAIndicesUpdaterDecode):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward, twist: DCP sharding applied on the graph-replay branch only; the eager branch plans whole-sequence lengths
    # expect: SG203
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        q_indptr,
        kv_indptr,
        init_metadata_replay=False,
        spec_info=None,
        *,
        plan,
        req_pool_indices,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = (
            fast_decode_kwargs["kv_indices"]
            if init_metadata_replay
            else torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        )
        translator = self.attn_backend.kv_index_translator
        translated = translator.pack_read_stream(
            plan, req_pool_indices=req_pool_indices, seq_lens=paged_kernel_lens,
            indptr=kv_indptr, out=kv_indices,
        )
        n_ids = paged_kernel_lens_sum
        if init_metadata_replay:
            if get_parallel().dcp_enabled:
                n_ids = plan_dcp_decode_metadata(
                    kv_lens, kv_indptr, kv_indices, True, fast_decode_kwargs, bs
                )
            if not translated and n_ids > 0 and translator.needs_read_translate:
                valid = kv_indices[:n_ids]
                valid.copy_(translator.translate_dcp_read_ids(valid))
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )
            return
        if not translated and n_ids > 0 and translator.needs_read_translate:
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


class ForkIndicesUpdaterDecodeLocal(FlashInferMLAIndicesUpdaterDecode):
    # idiom: flashinfer_mla_backend.FlashInferMLAIndicesUpdaterDecode.call_begin_forward, twist: one DCP shard step ahead of the replay / eager split, so both plan branches see rank-local lengths
    # expect: clean
    def call_begin_forward(
        self,
        wrapper,
        paged_kernel_lens,
        paged_kernel_lens_sum,
        q_indptr,
        kv_indptr,
        init_metadata_replay=False,
        spec_info=None,
        *,
        plan,
        req_pool_indices,
        **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        q_indptr = q_indptr[: bs + 1]
        kv_lens = paged_kernel_lens.to(torch.int32)
        kv_indptr[1 : bs + 1] = torch.cumsum(paged_kernel_lens, dim=0)
        kv_indptr = kv_indptr[: bs + 1]
        kv_indices = (
            fast_decode_kwargs["kv_indices"]
            if init_metadata_replay
            else torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        )
        translator = self.attn_backend.kv_index_translator
        translated = translator.pack_read_stream(
            plan, req_pool_indices=req_pool_indices, seq_lens=paged_kernel_lens,
            indptr=kv_indptr, out=kv_indices,
        )
        n_ids = paged_kernel_lens_sum
        if get_parallel().dcp_enabled:
            n_ids = plan_dcp_decode_metadata(
                kv_lens, kv_indptr, kv_indices, init_metadata_replay,
                fast_decode_kwargs, bs,
            )
        if not translated and n_ids > 0 and translator.needs_read_translate:
            valid = kv_indices[:n_ids]
            valid.copy_(translator.translate_dcp_read_ids(valid))
        if init_metadata_replay:
            wrapper.plan(
                fast_decode_kwargs["qo_indptr_cpu"],
                fast_decode_kwargs["kv_indptr_cpu"],
                kv_indices,
                fast_decode_kwargs["kv_len_arr_cpu"],
                self.num_local_heads,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                1,
                False,
                self.scaling,
                self.data_type,
                self.data_type,
            )
        else:
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
