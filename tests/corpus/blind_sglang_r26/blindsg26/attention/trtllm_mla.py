"""Fork TRTLLM MLA backend (DeepSeek decode with decode-context parallelism)."""

from __future__ import annotations

import logging
from typing import Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg26.attention.mla_kernels import launch_trtllm_mla_decode
from blindsg26.attention.query_prep import MlaQueryPrepMixin
from blindsg26.common.settings import DcpLayout, MlaLaunchSettings

logger = logging.getLogger(__name__)


class ForkTRTLLMMLABackend(MlaQueryPrepMixin, TRTLLMMLABackend):
    """TRTLLM MLA with the fork's hoisted per-step lengths."""

    def __init__(
        self,
        model_runner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
        backend: str = "trtllm-gen",
    ):
        super().__init__(
            model_runner,
            skip_prefill,
            kv_indptr_buf,
            q_indptr_decode_buf,
            backend=backend,
        )
        self.launch_settings = MlaLaunchSettings.from_model_runner(model_runner)
        self.dcp = DcpLayout.current()
        # Per-step hoisted lengths (refreshed by init_forward_metadata).
        self._step_lens_i32: Optional[torch.Tensor] = None
        self._step_local_lens: Optional[torch.Tensor] = None

    def init_cuda_graph_state(
        self,
        max_bs: int,
        max_num_tokens: int,
        kv_indices_buf: Optional[torch.Tensor] = None,
    ):
        super().init_cuda_graph_state(max_bs, max_num_tokens, kv_indices_buf)
        # Capture-stable homes for the hoisted lengths (refreshed per step).
        self._step_lens_buf = torch.zeros((max_bs,), dtype=torch.int32, device=self.device)
        self._step_local_lens_buf = torch.zeros_like(self._step_lens_buf)

    def _hoist_step_lens(self, seq_lens: torch.Tensor) -> None:
        bs = seq_lens.shape[0]
        local = self._get_dcp_local_seq_lens(seq_lens).to(torch.int32)
        buf = getattr(self, "_step_lens_buf", None)
        if buf is not None and bs <= buf.shape[0]:
            buf[:bs].copy_(seq_lens)
            self._step_local_lens_buf[:bs].copy_(local)
            self._step_lens_i32 = buf[:bs]
            self._step_local_lens = self._step_local_lens_buf[:bs]
        else:
            self._step_lens_i32 = seq_lens.to(torch.int32)
            self._step_local_lens = local

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            # Hoist the int32 conversions out of the per-layer decode.
            self._hoist_step_lens(forward_batch.seq_lens)

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        super().init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._hoist_step_lens(forward_batch.seq_lens[: forward_batch.batch_size])

    # ------------------------------------------------------------------ cases
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (global lens only where DCP is off; DCP delegated to _forward_decode_dcp)
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        if self.data_type == torch.float8_e4m3fn or cos_sin_cache is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        if parallel.dcp_enabled:
            return self._forward_decode_dcp(
                query, kv_cache, metadata, layer, forward_batch
            )
        # No DCP: this rank holds every page, the batch lengths are exact.
        raw_out = launch_trtllm_mla_decode(
            self,
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (metadata.seq_lens_k localized by init_forward_metadata)
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if bs == 0:
            # Idle DP rank: nothing to attend, neutral state for the merge.
            out = query.new_zeros((0, layer.tp_q_head_num * layer.v_head_dim))
            lse = torch.empty((0, layer.tp_q_head_num), dtype=torch.float32, device=query.device)
            return out, lse
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
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
        return self._finish_dcp_decode(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal for q_len > 1) applied in forward_extend
    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        mode = forward_batch.forward_mode
        spec_mode = mode.is_target_verify() or mode.is_draft_extend_v2()
        if spec_mode and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "fork trtllm_mla: DCP target-verify / draft-extend needs the global "
                "causal bound; run --attention-backend cutedsl_mla"
            )
        if (
            mode.is_target_verify()
            and forward_batch.spec_info.ragged_verify_layout is None
        ):
            q, kv_cache = self._prepare_spec_query(
                q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
            metadata = self._decode_metadata(forward_batch)
            bs = forward_batch.batch_size
            draft_token_num = forward_batch.spec_info.draft_token_num
            raw_out = launch_trtllm_mla_decode(
                self,
                query=q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim),
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k + draft_token_num,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


class HoistedLensTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Reads the hoisted int32 lengths instead of the metadata's."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py (0.5.18) hoisted int32 lens, in TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        step_lens = self._step_lens_i32
        if step_lens is None or step_lens.shape[0] < bs:
            step_lens = forward_batch.seq_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=step_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, step_lens[:bs], layer, bs)


class LocalHoistTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Same hoist, reading the rank-local copy."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py (0.5.18) hoisted rank-local lens, in TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local_seq_lens = self._step_local_lens
        if local_seq_lens is None or local_seq_lens.shape[0] < bs:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, local_seq_lens[:bs], layer, bs)


class FlaggedLensTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Lets ops switch the hoisted lengths off (SGLANG_FORK_MLA_HOISTED_LENS=0)."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; bug only with SGLANG_FORK_MLA_HOISTED_LENS=0 (launch_settings.use_hoisted_lens False)
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if self.launch_settings.use_hoisted_lens and metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, local_seq_lens, layer, bs)


class GlobalLseTRTLLMMLABackend(ForkTRTLLMMLABackend):
    """Decode variant that returns the LSE for the cross-rank merge itself."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (metadata.global_seq_lens_k)
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        # global_seq_lens_k is the int32 copy init_forward_metadata keeps.
        kv_lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp_decode(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)
