"""Launch-style variants of the fork TRTLLM MLA DCP decode.

Each class overrides ``_forward_decode_dcp`` (the hook SGLang's
``TRTLLMMLABackend.forward_decode`` calls when DCP is on) with one of the
launch styles the fork has shipped over time.
"""

from __future__ import annotations

import functools
import logging

import torch

from sglang.srt.layers.dcp import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg26.attention.mla_kernels import launch_trtllm_mla_decode
from blindsg26.attention.trtllm_mla import ForkTRTLLMMLABackend
from blindsg26.common.dcp import DecodeLaunchArgs

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class FusedLaunchTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp with a direct flashinfer launch (mla_kernels.launch_trtllm_mla_decode)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class FusedLocalLaunchTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/dcp/layout.py get_dcp_lens before a direct trtllm_batch_decode_with_kv_cache_mla launch
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        local_lens = get_dcp_lens(
            forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, local_lens, layer, bs)


class ArgsTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp via common.dcp.DecodeLaunchArgs.from_batch (classmethod factory)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        args = DecodeLaunchArgs.from_batch(forward_batch, metadata)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=args.block_tables,
            seq_lens=args.seq_lens,
            max_seq_len=args.max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, args.seq_lens, layer, bs)


class LocalArgsTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp via common.dcp.DecodeLaunchArgs.from_batch_local (get_dcp_lens inside the factory)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        args = DecodeLaunchArgs.from_batch_local(forward_batch, metadata)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=args.block_tables,
            seq_lens=args.seq_lens,
            max_seq_len=args.max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, args.seq_lens, layer, bs)


class FusedReplayTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Refreshes the capture-stable buffers right before the launch."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_cuda_graph_metadata (decode seq_lens_k.copy_) fused into the decode launch
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        metadata.seq_lens_k[:bs].copy_(seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            forward_batch.req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(seq_lens),
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class LocalFusedReplayTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata fused into the decode launch
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        local_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        if metadata.global_seq_lens_k is not None:
            metadata.global_seq_lens_k[:bs].copy_(seq_lens)
        metadata.seq_lens_k[:bs].copy_(local_seq_lens)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            forward_batch.req_pool_indices[:bs],
            local_seq_lens,
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class LambdaLensTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (lens through a lambda)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        kv_lens_of = lambda fb: fb.seq_lens[: fb.batch_size].to(torch.int32)  # noqa: E731
        bs = forward_batch.batch_size
        kv_lens = kv_lens_of(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class LambdaLocalTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens (get_dcp_lens through a lambda)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        localize = lambda t: get_dcp_lens(t, self.dcp.size, self.dcp.rank).to(torch.int32)  # noqa: E731
        bs = forward_batch.batch_size
        kv_lens = localize(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class PartialLaunchTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (functools.partial over trtllm_batch_decode_with_kv_cache_mla)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        decode = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="trtllm-gen",
            return_lse=True,
        )
        bs = forward_batch.batch_size
        raw_out, lse = decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.global_seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._finish_dcp_decode(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class PartialLocalLaunchTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (functools.partial, rank-local metadata.seq_lens_k)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        decode = functools.partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="trtllm-gen",
            return_lse=True,
        )
        bs = forward_batch.batch_size
        local_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
        raw_out, lse = decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._finish_dcp_decode(raw_out, lse, local_lens, layer, bs)


class ModeTableTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Per-forward-mode length handlers."""

    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._lens_handlers = {
            ForwardMode.DECODE: self._decode_kv_lens,
            ForwardMode.IDLE: self._decode_kv_lens,
        }

    def _decode_kv_lens(self, forward_batch, metadata):
        return forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (lens from a dict of handlers keyed by ForwardMode)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        handler = self._lens_handlers[forward_batch.forward_mode]
        kv_lens = handler(forward_batch, metadata)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class LocalModeTableTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Per-forward-mode length handlers, rank-local; spec modes refused."""

    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._lens_handlers = {
            ForwardMode.DECODE: self._local_kv_lens,
            ForwardMode.IDLE: self._local_kv_lens,
            ForwardMode.TARGET_VERIFY: self._refuse_multi_token,
            ForwardMode.DRAFT_EXTEND_V2: self._refuse_multi_token,
        }

    def _local_kv_lens(self, forward_batch, metadata):
        return self._get_dcp_local_seq_lens(
            forward_batch.seq_lens[: forward_batch.batch_size]
        )

    def _refuse_multi_token(self, forward_batch, metadata):
        raise NotImplementedError(
            f"{forward_batch.forward_mode} under DCP needs cutedsl_mla"
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (dict of handlers keyed by ForwardMode, rank-local lens)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        handler = self._lens_handlers[forward_batch.forward_mode]
        kv_lens = handler(forward_batch, metadata)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class NvtxTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp inside an nvtx try/finally
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        torch.cuda.nvtx.range_push(f"mla_dcp_decode_l{layer.layer_id}")
        try:
            kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        finally:
            torch.cuda.nvtx.range_pop()
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class NvtxLocalTRTLLMMLABackend(ForkTRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp inside an nvtx try/finally (rank-local lens)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        torch.cuda.nvtx.range_push(f"mla_dcp_decode_l{layer.layer_id}")
        try:
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
        finally:
            torch.cuda.nvtx.range_pop()
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class PropertyLensTRTLLMMLABackend(ForkTRTLLMMLABackend):
    @property
    def step_kv_lens(self) -> torch.Tensor:
        """int32 lengths of the current step (hoisted by init_forward_metadata)."""
        return self._step_lens_i32

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (lens through a property over the hoisted step lens)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = self.step_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)


class PropertyLocalLensTRTLLMMLABackend(ForkTRTLLMMLABackend):
    @property
    def step_local_kv_lens(self) -> torch.Tensor:
        """Rank-local int32 lengths of the current step."""
        return self._step_local_lens

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (rank-local lens through a property)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = self.step_local_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, kv_lens, layer, bs)
