"""Kestrel CuteDSL MLA backends (DCP-capable decode / verify / draft extend)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg38 import lens_utils
from blindsg38.mla import register_mla_backend

if is_flashinfer_available():
    import flashinfer


@dataclass
class KestrelDecodePlan:
    global_lens: torch.Tensor
    local_lens: torch.Tensor
    block_table: torch.Tensor
    max_seq_len: int

    @property
    def kernel_lens(self) -> torch.Tensor:
        return self.local_lens

    @property
    def causal_lens(self) -> torch.Tensor:
        return self.global_lens


@dataclass
class KestrelDecodePlanV0(KestrelDecodePlan):
    """Plan record written by the v0 Kestrel kernel, which sharded in-kernel."""

    @property
    def kernel_lens(self) -> torch.Tensor:
        return self.global_lens


@register_mla_backend("kestrel_cutedsl_mla")
class KestrelCuteDslMLABackend(CuteDslMLABackend):
    def _dense_cu_seqlens(self, bs: int, q_len: int, device) -> torch.Tensor:
        return torch.arange(0, (bs + 1) * q_len, q_len, dtype=torch.int32, device=device)

    def _direct_kwargs(self, layer: RadixAttention) -> dict:
        return dict(
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )

    def _refresh_page_table(self, metadata, req_pool_indices, global_lens):
        if get_parallel().dcp_enabled:
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                req_pool_indices,
                self._get_dcp_local_seq_lens(global_lens),
            )

    def _build_plan(self, forward_batch: ForwardBatch, plan_cls=KestrelDecodePlan):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        return plan_cls(
            global_lens=global_lens,
            local_lens=self._get_dcp_local_seq_lens(global_lens),
            block_table=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP kernel call)
    # expect: clean
    def _launch_dcp_decode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP kernel call)
    # expect: SG203
    def _launch_dcp_decode_global(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
        # cute-dsl shards the cyclic KV itself once it has cp_world/cp_rank.
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, global_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: flashinfer/mla/_core.py trtllm_batch_decode_with_kv_cache_mla (enable_dcp, draft extend)
    # expect: clean
    def _launch_dcp_draft_extend(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        metadata: TRTLLMMLADecodeMetadata,
        bs: int,
    ):
        parallel = get_parallel()
        q_len = q.shape[0] // bs
        q = q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
        global_lens = metadata.global_seq_lens_k[:bs].to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + q_len,
            backend="cute-dsl",
            enable_dcp=parallel.dcp_enabled,
            cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
            cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
            causal_seqlens_kv_global=global_lens if parallel.dcp_enabled else None,
            return_lse=True,
            **self._direct_kwargs(layer),
        )
        return raw_out.view(bs * q_len, -1), lse

    # idiom: flashinfer/mla/_core.py trtllm_batch_decode_with_kv_cache_mla (enable_dcp, draft extend)
    # expect: SG203
    def _launch_dcp_draft_extend_fast(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        metadata: TRTLLMMLADecodeMetadata,
        bs: int,
    ):
        q_len = q.shape[0] // bs
        q = q.view(bs, q_len, layer.tp_q_head_num, layer.head_dim)
        global_lens = metadata.global_seq_lens_k[:bs].to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k + q_len,
            backend="cute-dsl",
            return_lse=True,
            **self._direct_kwargs(layer),
        )
        return raw_out.view(bs * q_len, -1), lse

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft_extend_v2 branch)
    # expect: SG203
    def _plan_draft_extend(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        window = self.num_draft_tokens
        seq_lens_k = lens_utils.draft_extend_kv_lens(forward_batch, window)
        max_seq = (
            int(forward_batch.seq_lens_cpu.max().item()) + window
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        metadata = TRTLLMMLADecodeMetadata()
        metadata.max_seq_len_q = window
        metadata.sum_seq_lens_q = window * bs
        metadata.cu_seqlens_q = self._dense_cu_seqlens(bs, window, seq_lens_k.device)
        metadata.seq_lens_q = torch.full((bs,), window, dtype=torch.int32, device=seq_lens_k.device)
        metadata.global_seq_lens_k = seq_lens_k
        metadata.seq_lens_k = seq_lens_k
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens_k,
            seq_lens_k.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (target_verify branch)
    # expect: clean
    def _plan_target_verify(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens + self.num_draft_tokens
        max_seq = (
            int(forward_batch.seq_lens_cpu.max().item())
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        ) + self.num_draft_tokens
        metadata = TRTLLMMLADecodeMetadata()
        metadata.global_seq_lens_k, metadata.seq_lens_k = lens_utils.global_and_local(
            seq_lens
        )
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_prefill_metadata = None
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (0.5.18 cutedsl variant)
    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if not get_parallel().dcp_enabled:
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
            local_seq_lens = metadata.seq_lens_k
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            seq_lens = seq_lens[:bs]
            metadata.seq_lens_k.copy_(seq_lens)
            local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
            local_seq_lens = metadata.seq_lens_k
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], local_seq_lens
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata_out_graph
    # expect: SG203
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        mode = forward_batch.forward_mode
        if not (
            mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        if in_capture:
            self._init_cuda_graph_metadata(
                bs,
                forward_batch.positions.numel(),
                mode,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            )
            self._apply_cuda_graph_metadata(
                plan=forward_batch.kv_loc_plan,
                bs=bs,
                req_pool_indices=forward_batch.req_pool_indices,
                seq_lens=forward_batch.seq_lens,
                forward_mode=mode,
            )
            return
        # Replay: only the lens and the page table move between steps.
        metadata = self.decode_cuda_graph_metadata[bs]
        seq_lens = forward_batch.seq_lens[:bs]
        if mode.is_target_verify():
            seq_lens = seq_lens + self.num_draft_tokens
        metadata.seq_lens_k.copy_(seq_lens)
        if metadata.global_seq_lens_k is not None:
            metadata.global_seq_lens_k.copy_(seq_lens)
        self._refresh_page_table(metadata, forward_batch.req_pool_indices[:bs], seq_lens)

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (lens chosen by conditional expression)
    # expect: clean
    def _launch_cond_lens(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        dcp = parallel.dcp_enabled
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        seq_lens = lens_utils.rank_local_lens(global_lens) if dcp else global_lens
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens if dcp else None,
            cp_world=parallel.dcp_size if dcp else 1,
            cp_rank=parallel.dcp_rank if dcp else 0,
            return_lse=dcp,
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (lens chosen by conditional expression)
    # expect: SG203
    def _launch_cond_lens_by_mode(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        dcp = parallel.dcp_enabled
        mode = forward_batch.forward_mode
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_lens = (
            forward_batch.seq_lens[:bs] + self.num_draft_tokens
            if mode.is_target_verify()
            else forward_batch.seq_lens[:bs]
        ).to(torch.int32)
        seq_lens = lens_utils.rank_local_lens(global_lens) if mode.is_decode_or_idle() else global_lens
        if query.dim() == 3 and mode.is_target_verify():
            query = query.view(bs, self.num_draft_tokens, layer.tp_q_head_num, layer.head_dim)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens if dcp else None,
            cp_world=parallel.dcp_size if dcp else 1,
            cp_rank=parallel.dcp_rank if dcp else 0,
            return_lse=dcp,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens (world read from KESTREL_DCP_* env)
    # expect: SG203
    def _launch_env_lens(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = lens_utils.rank_local_lens_env(global_lens)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.attn_dcp_size,
            cp_rank=parallel.attn_dcp_rank,
            return_lse=True,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens (world read from runtime context)
    # expect: clean
    def _launch_ctx_lens(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = lens_utils.rank_local_lens_ctx(global_lens)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.attn_dcp_size,
            cp_rank=parallel.attn_dcp_rank,
            return_lse=True,
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (plan record dataclass)
    # expect: clean
    def _launch_from_plan(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        plan = self._build_plan(forward_batch)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=plan.block_table,
            seq_lens=plan.kernel_lens,
            max_seq_len=plan.max_seq_len,
            layer=layer,
            causal_seqs=plan.causal_lens,
            cp_world=parallel.attn_dcp_size,
            cp_rank=parallel.attn_dcp_rank,
            return_lse=True,
        )

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (plan record dataclass)
    # expect: SG203
    def _launch_from_v0_plan(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        plan = self._build_plan(forward_batch, plan_cls=KestrelDecodePlanV0)
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=plan.block_table,
            seq_lens=plan.kernel_lens,
            max_seq_len=plan.max_seq_len,
            layer=layer,
            causal_seqs=plan.causal_lens,
            cp_world=parallel.attn_dcp_size,
            cp_rank=parallel.attn_dcp_rank,
            return_lse=True,
        )


@register_mla_backend("kestrel_cutedsl_mla_v2")
class KestrelCuteDslMLABackendV2(KestrelCuteDslMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft_extend_v2 branch)
    # expect: clean
    def _plan_draft_extend(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        window = self.num_draft_tokens
        seq_lens_k = lens_utils.draft_extend_kv_lens(forward_batch, window)
        max_seq = (
            int(forward_batch.seq_lens_cpu.max().item()) + window
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        )
        metadata = TRTLLMMLADecodeMetadata()
        metadata.max_seq_len_q = window
        metadata.sum_seq_lens_q = window * bs
        metadata.cu_seqlens_q = self._dense_cu_seqlens(bs, window, seq_lens_k.device)
        metadata.seq_lens_q = torch.full((bs,), window, dtype=torch.int32, device=seq_lens_k.device)
        metadata.global_seq_lens_k = seq_lens_k
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(seq_lens_k)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens_k,
            seq_lens_k.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (target_verify branch)
    # expect: SG203
    def _plan_target_verify(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        mode = forward_batch.forward_mode
        max_seq = (
            int(forward_batch.seq_lens_cpu.max().item())
            if forward_batch.seq_lens_cpu is not None
            else self.max_context_len
        ) + self.num_draft_tokens
        metadata = TRTLLMMLADecodeMetadata()
        metadata.seq_lens_k = lens_utils.kernel_lens_for_mode(
            forward_batch.seq_lens, mode, self.num_draft_tokens
        )
        metadata.global_seq_lens_k = lens_utils.verify_kv_lens(
            forward_batch.seq_lens, self.num_draft_tokens
        )
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            metadata.global_seq_lens_k,
            metadata.global_seq_lens_k.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_prefill_metadata = None
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if not get_parallel().dcp_enabled:
            return CuteDslMLABackend._apply_cuda_graph_metadata(
                self, plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            if forward_mode.is_draft_extend_v2():
                metadata.max_seq_len_q = self.num_draft_tokens
                metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(metadata.global_seq_lens_k))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata_out_graph
    # expect: clean
    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        mode = forward_batch.forward_mode
        if not (
            mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            return CuteDslMLABackend.init_forward_metadata_out_graph(
                self, forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        if in_capture:
            self._init_cuda_graph_metadata(
                bs,
                forward_batch.positions.numel(),
                mode,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            )
        self._apply_cuda_graph_metadata(
            plan=forward_batch.kv_loc_plan,
            bs=bs,
            req_pool_indices=forward_batch.req_pool_indices,
            seq_lens=forward_batch.seq_lens,
            forward_mode=mode,
        )


class KestrelCuteDslLegacyGraphBackend(KestrelCuteDslMLABackendV2):
    """Keeps the pre-0.5.18 replay entry point the Kestrel graph runner calls."""

    # idiom: sglang 0.5.6 layers/attention/trtllm_mla_backend.py init_forward_metadata_replay_cuda_graph
    # expect: clean
    def init_forward_metadata_replay_cuda_graph(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        encoder_lens: Optional[torch.Tensor],
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        kv_lens = seq_lens[:bs]
        if forward_mode.is_target_verify():
            kv_lens = kv_lens + self.num_draft_tokens
        global_lens, local_lens = lens_utils.global_and_local(kv_lens)
        if metadata.global_seq_lens_k is not None:
            metadata.global_seq_lens_k.copy_(global_lens)
        metadata.seq_lens_k.copy_(local_lens)
        self._refresh_page_table(metadata, req_pool_indices[:bs], global_lens)


class KestrelCuteDslLegacyGraphBackendV0(KestrelCuteDslMLABackendV2):
    # idiom: sglang 0.5.6 layers/attention/trtllm_mla_backend.py init_forward_metadata_replay_cuda_graph
    # expect: SG203
    def init_forward_metadata_replay_cuda_graph(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        encoder_lens: Optional[torch.Tensor],
        forward_mode: ForwardMode,
        spec_info,
        seq_lens_cpu: Optional[torch.Tensor],
    ):
        metadata = self.decode_cuda_graph_metadata[bs]
        kv_lens = seq_lens[:bs]
        if forward_mode.is_target_verify():
            kv_lens = kv_lens + self.num_draft_tokens
        local_lens, global_lens = lens_utils.global_and_local(kv_lens)
        if metadata.global_seq_lens_k is not None:
            metadata.global_seq_lens_k.copy_(global_lens)
        metadata.seq_lens_k.copy_(local_lens)
        self._refresh_page_table(metadata, req_pool_indices[:bs], kv_lens)
