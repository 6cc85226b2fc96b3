"""TRT-LLM (trtllm-gen) MLA backends of the fork.

trtllm-gen has no in-kernel DCP support: under DCP upstream serves only the
single-token decode on the rank-local page table + rank-local ``seq_lens``
(``TRTLLMMLABackend._forward_decode_dcp``) and refuses everything else in
``_run_decode_kernel``. The overrides here touch that decode path and the
multi-step draft backend.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg42.attn.dcp_lens import split_dcp_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)


def _finish_dcp_decode(backend, raw_out, lse, local_seq_lens, layer, bs):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(
        output, lse, local_seq_lens, backend.q_indptr_decode[: bs + 1], 1
    )
    return output.flatten(1), lse


class TrtllmSpecDcpMLABackend(TRTLLMMLABackend):
    """trtllm-gen MLA for MTP deployments with DCP: the draft extend runs on
    this rank's shard through the same decode kernel."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ) -> torch.Tensor:
        if causal_seqs is not None:
            raise NotImplementedError(
                "a global causal bound needs the cute-dsl kernel; select cutedsl_mla"
            )
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        seq_lens_i32 = (
            seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
        )
        extra_kwargs = {"backend": self.backend} if self.backend != "trtllm-gen" else {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = (
                self._multi_ctas_kv_counter_buffer
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens_i32,
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            **extra_kwargs,
        )


class TrtllmCountingMLABackend(TRTLLMMLABackend):
    """Counts kernel launches per mode for the fork's profiler; multi-token
    DCP launches are refused before reaching upstream."""

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.kernel_launches = 0

    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ) -> torch.Tensor:
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and q_len > 1:
            raise NotImplementedError(
                "trtllm_mla cannot bound a multi-token query globally under DCP; "
                "select cutedsl_mla for speculative DCP"
            )
        self.kernel_launches += 1
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


class TrtllmSplitLensMLABackend(TRTLLMMLABackend):
    """DCP decode deriving both length views with ``split_dcp_lens``."""

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        local_seq_lens, global_seq_lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, local_seq_lens, layer, bs)


class TrtllmSplitHelperMLABackend(TRTLLMMLABackend):
    """``split_dcp_lens`` variant unpacking in the helper's order."""

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        global_seq_lens, local_seq_lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, local_seq_lens, layer, bs)


class TrtllmLaunchClosureMLABackend(TRTLLMMLABackend):
    """DCP decode launching through a local closure (shared with the fork's
    per-layer timing wrapper)."""

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size

        def _launch(lens: torch.Tensor):
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )

        step_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = _launch(step_lens)
        return _finish_dcp_decode(self, raw_out, lse, step_lens, layer, bs)


class TrtllmClosureMLABackend(TRTLLMMLABackend):
    """Closure launch fed with this rank's lengths."""

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size

        def _launch(lens: torch.Tensor):
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )

        if metadata.seq_lens_k is not None:
            step_lens = metadata.seq_lens_k[:bs]
        else:
            step_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = _launch(step_lens)
        return _finish_dcp_decode(self, raw_out, lse, step_lens, layer, bs)


class TrtllmKwargsMLABackend(TRTLLMMLABackend):
    """DCP decode assembling the kernel kwargs in one dict (logged on the
    fork's debug path)."""

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        kernel_kwargs = {
            "query": query,
            "kv_cache": kv_cache,
            "block_tables": metadata.block_kv_indices,
            "max_seq_len": metadata.max_seq_len_k,
            "layer": layer,
            "return_lse": True,
        }
        if metadata.global_seq_lens_k is not None:
            kernel_kwargs["seq_lens"] = metadata.global_seq_lens_k[:bs]
        else:
            kernel_kwargs["seq_lens"] = forward_batch.seq_lens[:bs]
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("dcp decode kwargs: %s", sorted(kernel_kwargs))
        raw_out, lse = self._run_decode_kernel(**kernel_kwargs)
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        return _finish_dcp_decode(self, raw_out, lse, local_seq_lens, layer, bs)


class TrtllmKwargDictMLABackend(TRTLLMMLABackend):
    """Kwargs-dict variant filled with the hoisted rank-local lengths."""

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        kernel_kwargs = {
            "query": query,
            "kv_cache": kv_cache,
            "block_tables": metadata.block_kv_indices,
            "max_seq_len": metadata.max_seq_len_k,
            "layer": layer,
            "return_lse": True,
        }
        if metadata.seq_lens_k is not None:
            kernel_kwargs["seq_lens"] = metadata.seq_lens_k[:bs]
        else:
            kernel_kwargs["seq_lens"] = self._get_dcp_local_seq_lens(
                forward_batch.seq_lens[:bs]
            )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("dcp decode kwargs: %s", sorted(kernel_kwargs))
        raw_out, lse = self._run_decode_kernel(**kernel_kwargs)
        return _finish_dcp_decode(
            self, raw_out, lse, kernel_kwargs["seq_lens"], layer, bs
        )


class TrtllmSmallBatchMLABackend(TRTLLMMLABackend):
    """Small DCP decode batches skip the hoisted buffers (which are sized for
    the captured batch) and launch on the batch lengths directly."""

    small_batch_threshold: int = 4

    def _launch_dcp(self, query, kv_cache, metadata, layer, lens, bs):
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, lens, layer, bs)

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if bs <= self.small_batch_threshold:
            return self._launch_dcp(
                query,
                kv_cache,
                metadata,
                layer,
                forward_batch.seq_lens[:bs].to(torch.int32),
                bs,
            )
        return self._launch_dcp(
            query, kv_cache, metadata, layer, metadata.seq_lens_k[:bs], bs
        )


class TrtllmShortBatchMLABackend(TRTLLMMLABackend):
    """Small-batch shortcut that localizes the batch lengths itself."""

    small_batch_threshold: int = 4

    def _launch_dcp(self, query, kv_cache, metadata, layer, lens, bs):
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, lens, layer, bs)

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if bs <= self.small_batch_threshold:
            return self._launch_dcp(
                query,
                kv_cache,
                metadata,
                layer,
                self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs]),
                bs,
            )
        return self._launch_dcp(
            query, kv_cache, metadata, layer, metadata.seq_lens_k[:bs], bs
        )


class TrtllmLayoutLensMLABackend(TRTLLMMLABackend):
    """DCP decode computing this rank's lengths with the layout helper
    directly (``get_dcp_lens``) instead of the backend wrapper."""

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        base_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
        local_seq_lens = get_dcp_lens(
            base_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, local_seq_lens, layer, bs)


class TrtllmLayoutHelperMLABackend(TRTLLMMLABackend):
    """Layout-helper variant reading the hoisted global buffer."""

    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        base_lens = (
            metadata.global_seq_lens_k[:bs]
            if metadata.global_seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
        local_seq_lens = get_dcp_lens(
            base_lens, parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, local_seq_lens, layer, bs)


class SharedLensMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """Multi-step TRT-LLM MLA draft backend whose step backends share one
    int32 length buffer per draft round under DCP."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        for i in range(self.speculative_num_steps - 1):
            self.attn_backends[i].init_forward_metadata(forward_batch)
        if not get_parallel().dcp_enabled:
            return
        shared_lens = forward_batch.seq_lens.to(torch.int32)
        for i in range(self.speculative_num_steps - 1):
            metadata = self.attn_backends[i].forward_decode_metadata
            metadata.global_seq_lens_k = shared_lens
            metadata.seq_lens_k = shared_lens


class SharedBufferMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """Shared per-round buffers, one global and one rank-local."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        for i in range(self.speculative_num_steps - 1):
            self.attn_backends[i].init_forward_metadata(forward_batch)
        if not get_parallel().dcp_enabled:
            return
        shared_global = forward_batch.seq_lens.to(torch.int32)
        shared_local = self.attn_backends[0]._get_dcp_local_seq_lens(shared_global)
        for i in range(self.speculative_num_steps - 1):
            metadata = self.attn_backends[i].forward_decode_metadata
            metadata.global_seq_lens_k = shared_global
            metadata.seq_lens_k = shared_local
