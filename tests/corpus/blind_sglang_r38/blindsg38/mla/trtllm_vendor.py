"""Kestrel TRT-LLM MLA backends.

Subclasses SGLang's ``TRTLLMMLABackend`` so the Kestrel decode kernel build
(shipped as a flashinfer ``trtllm_batch_decode_with_kv_cache_mla`` backend)
can be selected per deployment.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    _ENABLE_PDL,
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg38 import lens_utils
from blindsg38.mla import register_mla_backend
from blindsg38.vendor_config import KestrelParallelConfig, dcp_world, refuse_dcp

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


def _is_decode_family(mode: ForwardMode) -> bool:
    return mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()


class _KestrelKernelArgsMixin:
    def _common_kernel_kwargs(self, layer: RadixAttention) -> dict:
        return dict(
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            enable_pdl=_ENABLE_PDL,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )


@register_mla_backend("kestrel_trtllm_mla")
class KestrelTRTLLMMLABackend(_KestrelKernelArgsMixin, TRTLLMMLABackend):
    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        self.kcfg = KestrelParallelConfig.from_runtime()

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode family)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if not _is_decode_family(mode):
            return super().init_forward_metadata(forward_batch)

        bs = forward_batch.batch_size
        metadata = TRTLLMMLADecodeMetadata()
        if forward_batch.seq_lens_cpu is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max().item())
        else:
            max_seq = self.max_context_len
        seq_lens = forward_batch.seq_lens
        if mode.is_target_verify():
            self.forward_prefill_metadata = None
            max_seq += self.num_draft_tokens
            seq_lens = seq_lens + self.num_draft_tokens
            metadata.global_seq_lens_k = seq_lens.to(torch.int32)
        elif mode.is_draft_extend_v2():
            self.forward_prefill_metadata = None
            max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            seq_lens = seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
            metadata.max_seq_len_q = max_seq_len_q
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )
            metadata.seq_lens_q = forward_batch.extend_seq_lens
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = lens_utils.local_max_seq_len(int(max_seq))
        metadata.batch_size = bs
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel
    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        kernel_kwargs = self._common_kernel_kwargs(layer)
        kernel_kwargs.update(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            return_lse=return_lse,
        )
        if cp_world > 1 and causal_seqs is not None:
            kernel_kwargs.update(
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=cp_world,
                cp_rank=cp_rank,
                causal_seqlens_kv_global=causal_seqs.to(torch.int32),
                return_lse=True,
            )
        else:
            kernel_kwargs["backend"] = self.backend
            if self.backend == "trtllm-gen":
                kernel_kwargs["multi_ctas_kv_counter_buffer"] = (
                    self._multi_ctas_kv_counter_buffer
                )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify launch)
    # expect: SG203
    def _verify_dcp_launch(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        bs: int,
        draft_token_num: int,
    ):
        parallel = get_parallel()
        assert parallel.dcp_enabled
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        local_seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self._dense_q_indptr(bs, draft_token_num), draft_token_num
        )
        return output.flatten(1), lse

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify launch)
    # expect: clean
    def _verify_dcp_launch_bounded(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        bs: int,
        draft_token_num: int,
    ):
        parallel = get_parallel()
        assert parallel.dcp_enabled
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        local_seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self._dense_q_indptr(bs, draft_token_num), draft_token_num
        )
        return output.flatten(1), lse


@register_mla_backend("kestrel_trtllm_mla_dcp")
class KestrelTRTLLMMLABackendDCP(KestrelTRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP hoist of local lens)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if not _is_decode_family(forward_batch.forward_mode):
            return
        metadata = forward_batch.decode_trtllm_mla_metadata
        if get_parallel().dcp_enabled and metadata.seq_lens_k is not None:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal)
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if (
            get_parallel().dcp_enabled
            and q_len > 1
            and (causal_seqs is None or cp_world <= 1)
        ):
            raise NotImplementedError(
                "Kestrel trtllm_mla needs the global causal bound for a "
                "multi-token DCP query; select kestrel_cutedsl_mla."
            )
        return super()._run_decode_kernel(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            causal_seqs=causal_seqs,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        # Page table already holds only this rank's pages.
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


@register_mla_backend("kestrel_trtllm_mla_nodcp")
class KestrelNoDCPMLABackend(_KestrelKernelArgsMixin, TRTLLMMLABackend):
    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        refuse_dcp("kestrel_trtllm_mla_nodcp")
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (kernel call)
    # expect: clean
    def _decode_launch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            backend=self.backend,
            **self._common_kernel_kwargs(layer),
        )


@register_mla_backend("kestrel_trtllm_mla_permissive")
class KestrelPermissiveMLABackend(_KestrelKernelArgsMixin, TRTLLMMLABackend):
    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        if get_parallel().dcp_enabled:
            logger.warning("kestrel_trtllm_mla_permissive: DCP support is experimental")
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (kernel call)
    # expect: SG203
    def _decode_launch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            backend=self.backend,
            return_lse=get_parallel().dcp_enabled,
            **self._common_kernel_kwargs(layer),
        )


@register_mla_backend("kestrel_trtllm_mla_dispatch")
class KestrelDispatchMLABackend(_KestrelKernelArgsMixin, TRTLLMMLABackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (DCP dispatch)
    # expect: clean
    def forward_decode_kestrel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        if get_parallel().dcp_enabled:
            return self._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            backend=self.backend,
            **self._common_kernel_kwargs(layer),
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (DCP dispatch)
    # expect: SG203
    def forward_decode_kestrel_prefixed(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        if forward_batch.attn_dcp_metadata is not None:
            return self._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            backend=self.backend,
            **self._common_kernel_kwargs(layer),
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (metadata swap, try/finally)
    # expect: clean
    def _decode_with_local_view(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        saved = metadata.seq_lens_k
        try:
            metadata.seq_lens_k = lens_utils.seq_lens_for_kernel(
                forward_batch, forward_batch.batch_size
            )
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                backend=self.backend,
                return_lse=get_parallel().dcp_enabled,
                **self._common_kernel_kwargs(layer),
            )
        finally:
            metadata.seq_lens_k = saved

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (metadata swap, try/finally)
    # expect: SG203
    def _decode_with_local_table(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        saved = metadata.block_kv_indices
        try:
            if get_parallel().dcp_enabled:
                table = torch.full_like(saved, -1)
                lens_utils.fill_dcp_page_table(
                    self,
                    table,
                    forward_batch.req_pool_indices,
                    self._get_dcp_local_seq_lens(forward_batch.seq_lens),
                )
                metadata.block_kv_indices = table
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens.to(torch.int32),
                max_seq_len=metadata.max_seq_len_k,
                backend=self.backend,
                return_lse=get_parallel().dcp_enabled,
                **self._common_kernel_kwargs(layer),
            )
        finally:
            metadata.block_kv_indices = saved

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (launch bound with functools.partial)
    # expect: SG203
    def _decode_partial(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        launch = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            backend=self.backend,
            **self._common_kernel_kwargs(layer),
        )
        return launch(
            query=query, kv_cache=kv_cache, return_lse=get_parallel().dcp_enabled
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (launch bound with functools.partial)
    # expect: clean
    def _decode_partial_local(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        launch = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            backend=self.backend,
            **self._common_kernel_kwargs(layer),
        )
        return launch(
            query=query,
            kv_cache=kv_cache,
            seq_lens=lens_utils.seq_lens_for_kernel(forward_batch),
            return_lse=get_parallel().dcp_enabled,
        )


def _fill_decode_lens(metadata: TRTLLMMLADecodeMetadata, seq_lens, num_draft_tokens):
    metadata.global_seq_lens_k.copy_(seq_lens)
    metadata.seq_lens_k.copy_(lens_utils.rank_local_lens(seq_lens))


def _fill_verify_lens(metadata: TRTLLMMLADecodeMetadata, seq_lens, num_draft_tokens):
    torch.add(seq_lens, num_draft_tokens, out=metadata.global_seq_lens_k)
    metadata.seq_lens_k.copy_(lens_utils.rank_local_lens(metadata.global_seq_lens_k))


def _fill_draft_extend_lens_fast(metadata: TRTLLMMLADecodeMetadata, seq_lens, num_draft_tokens):
    metadata.global_seq_lens_k.copy_(seq_lens)
    metadata.seq_lens_k.copy_(seq_lens)


def _fill_draft_extend_lens(metadata: TRTLLMMLADecodeMetadata, seq_lens, num_draft_tokens):
    metadata.global_seq_lens_k.copy_(seq_lens)
    metadata.seq_lens_k.copy_(lens_utils.rank_local_lens(seq_lens))


_GRAPH_LEN_FILLERS = {
    ForwardMode.DECODE: _fill_decode_lens,
    ForwardMode.TARGET_VERIFY: _fill_verify_lens,
    ForwardMode.DRAFT_EXTEND_V2: _fill_draft_extend_lens_fast,
}

_GRAPH_LEN_FILLERS_V2 = {
    **_GRAPH_LEN_FILLERS,
    ForwardMode.DRAFT_EXTEND_V2: _fill_draft_extend_lens,
}


@register_mla_backend("kestrel_trtllm_mla_graph")
class KestrelGraphLensBackend(TRTLLMMLABackend):
    len_fillers = _GRAPH_LEN_FILLERS

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (per-mode filler registry)
    # expect: SG203
    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, forward_mode):
        if not get_parallel().dcp_enabled:
            return super()._apply_cuda_graph_metadata(
                plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        key = ForwardMode.DECODE if forward_mode.is_decode_or_idle() else forward_mode
        self.len_fillers[key](metadata, seq_lens[:bs], self.num_draft_tokens)
        if forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
        )


@register_mla_backend("kestrel_trtllm_mla_graph_v2")
class KestrelGraphLensBackendV2(KestrelGraphLensBackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata (per-mode filler registry)
    # expect: clean
    def _apply_cuda_graph_metadata(self, plan, bs, req_pool_indices, seq_lens, forward_mode):
        if not get_parallel().dcp_enabled:
            return TRTLLMMLABackend._apply_cuda_graph_metadata(
                self, plan, bs, req_pool_indices, seq_lens, forward_mode
            )
        metadata = self.decode_cuda_graph_metadata[bs]
        fillers = _GRAPH_LEN_FILLERS_V2
        key = ForwardMode.DECODE if forward_mode.is_decode_or_idle() else forward_mode
        fillers[key](metadata, seq_lens[:bs], self.num_draft_tokens)
        if forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


class KestrelMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        # One int32 cast shared by every draft step (per-layer casts are hot).
        seq_lens_i32 = forward_batch.seq_lens.to(torch.int32)
        for i in range(self.speculative_num_steps - 1):
            metadata = self.attn_backends[i].forward_decode_metadata
            if metadata is not None:
                metadata.seq_lens_k = seq_lens_i32


class KestrelMLAMultiStepDraftBackendDCP(TRTLLMMLAMultiStepDraftBackend):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        dcp_size, dcp_rank = dcp_world()
        seq_lens_i32 = lens_utils.rank_local_lens_arith(
            forward_batch.seq_lens, dcp_size, dcp_rank
        ).to(torch.int32)
        for i in range(self.speculative_num_steps - 1):
            metadata = self.attn_backends[i].forward_decode_metadata
            if metadata is not None:
                metadata.seq_lens_k = seq_lens_i32
