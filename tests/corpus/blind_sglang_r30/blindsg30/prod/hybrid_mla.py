"""Hybrid MLA backend: prefill on one backend, decode/verify delegated to an
inner TRTLLM-family backend held in ``self.inner``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg30.prod import mla_kernels as mk
from blindsg30.utils import dcp_lens as dl

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner


class StartupHybridMLABackend(mk.MLAQueryMixin, AttentionBackend):
    KERNEL = "trtllm-gen"

    def __init__(
        self,
        model_runner: "ModelRunner",
        prefill_backend: AttentionBackend,
        decode_backend: TRTLLMMLABackend,
    ):
        self.model_runner = model_runner
        self.prefill_backend = prefill_backend
        self.inner: TRTLLMMLABackend = decode_backend
        self.token_to_kv_pool = decode_backend.token_to_kv_pool
        self.page_size = decode_backend.page_size
        self.kv_index_translator = model_runner.kv_index_translator
        self.decode_impl = os.environ.get("STARTUP_HYBRID_DECODE", "delegate")
        self.verify_impl = os.environ.get("STARTUP_HYBRID_VERIFY", "delegate")
        self._decode_table = {
            "delegate": self.forward_decode_delegate,
            "direct": self.forward_decode_direct,
            "closure": self.forward_decode_closure,
            "dispatch": self.forward_decode_dispatch,
            "dispatch_local": self.forward_decode_dispatch_local,
            "cp_knob": self.forward_decode_wrong_knob,
            "dcp_knob": self.forward_decode_right_knob,
        }
        self._verify_table = {
            "delegate": self.forward_extend_verify,
            "refuse": self.forward_verify_refuse,
        }

    def _uses_inner(self, forward_batch: ForwardBatch) -> bool:
        mode = forward_batch.forward_mode
        return mode.is_decode_or_idle() or mode.is_target_verify()

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if self._uses_inner(forward_batch):
            self.inner.init_forward_metadata(forward_batch)
        else:
            self.prefill_backend.init_forward_metadata(forward_batch)

    def _meta(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.inner.forward_decode_metadata
        )

    def _finish(self, raw, local_lens, layer):
        if get_parallel().dcp_enabled:
            raw_out, lse = raw
            return self._finish_dcp(raw_out, lse, local_lens, layer)
        return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, **kwargs):
        return self._decode_table[self.decode_impl](
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, **kwargs):
        if forward_batch.forward_mode.is_target_verify():
            return self._verify_table[self.verify_impl](
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        return self.prefill_backend.forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope=q_rope, k_rope=k_rope
        )

    # ---------------------------------------------------------------- decode
    # idiom: layers/attention/hybrid_attn_backend.py HybridAttnBackend.forward_decode; delegates the whole decode to the inner backend
    # expect: clean
    def forward_decode_delegate(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        return self.inner.forward_decode(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope=q_rope, k_rope=k_rope
        )

    # idiom: layers/attention/hybrid_attn_backend.py forward_decode bypassing inner.forward_decode; calls inner._run_decode_kernel with forward_batch.seq_lens
    # expect: SG203
    def forward_decode_direct(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        raw = self.inner._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )
        return self._finish(raw, seq_lens, layer)

    # idiom: layers/attention/hybrid_attn_backend.py forward_decode; generic local launch closure over inner._run_decode_kernel, handed forward_batch.seq_lens
    # expect: SG203
    def forward_decode_closure(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        dcp_on = get_parallel().dcp_enabled
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        kv_cache = self._kv_cache(layer)

        def launch(lens: torch.Tensor):
            return self.inner._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=meta.block_kv_indices,
                seq_lens=lens,
                max_seq_len=meta.max_seq_len_k,
                layer=layer,
                return_lse=dcp_on,
            )

        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        return self._finish(launch(seq_lens), seq_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel swapped for a string-keyed kernel table; hands forward_batch.seq_lens
    # expect: SG203
    def forward_decode_dispatch(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        launch = mk.MLA_DECODE_KERNELS[self.KERNEL]
        raw = launch(
            self.inner,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            seq_lens,
            meta.max_seq_len_k,
            layer,
            return_lse=get_parallel().dcp_enabled,
        )
        return self._finish(raw, seq_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel swapped for a string-keyed kernel table; lens localized by dcp_lens.local_lens
    # expect: clean
    def forward_decode_dispatch_local(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        local = dl.local_lens(forward_batch.seq_lens[: forward_batch.batch_size])
        launch = mk.MLA_DECODE_KERNELS[self.KERNEL]
        raw = launch(
            self.inner,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            local,
            meta.max_seq_len_k,
            layer,
            return_lse=get_parallel().dcp_enabled,
        )
        return self._finish(raw, local, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _get_dcp_local_seq_lens gate; localizes only when attn_cp_size > 1 (prefill CP), not for DCP
    # expect: SG203
    def forward_decode_wrong_knob(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        if parallel.attn_cp_size > 1:
            seq_lens = dl.local_lens(seq_lens)
        raw = mk.MLA_DECODE_KERNELS[self.KERNEL](
            self.inner,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            seq_lens,
            meta.max_seq_len_k,
            layer,
            return_lse=parallel.dcp_enabled,
        )
        return self._finish(raw, seq_lens, layer)

    # idiom: layers/attention/trtllm_mla_backend.py _get_dcp_local_seq_lens gate; localizes on dcp_enabled, global only with DCP off
    # expect: clean
    def forward_decode_right_knob(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        if parallel.dcp_enabled:
            seq_lens = dl.local_lens(seq_lens)
        raw = mk.MLA_DECODE_KERNELS[self.KERNEL](
            self.inner,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            seq_lens,
            meta.max_seq_len_k,
            layer,
            return_lse=parallel.dcp_enabled,
        )
        return self._finish(raw, seq_lens, layer)

    # ---------------------------------------------------------------- verify
    # idiom: layers/attention/trtllm_mla_backend.py forward_extend DCP target-verify arm; inner._run_decode_kernel with rank-local lens and causal_seqs=global_seq_lens_k
    # expect: clean
    def forward_extend_verify(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        if not parallel.dcp_enabled or q_rope is None:
            return self.inner.forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope=q_rope, k_rope=k_rope
            )
        ndt = forward_batch.spec_info.draft_token_num
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=ndt)
        meta = self._meta(forward_batch)
        raw_out, lse = self.inner._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=meta.seq_lens_k,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            causal_seqs=meta.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer, tokens_per_req=ndt)

    # idiom: layers/attention/trtllm_mla_backend.py _run_decode_kernel refusal, hoisted into the hybrid; raises for DCP multi-token verify, else delegates
    # expect: clean
    def forward_verify_refuse(self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        ndt = forward_batch.spec_info.draft_token_num
        if get_parallel().dcp_enabled and ndt > 1:
            raise NotImplementedError(
                "hybrid MLA: target verify with more than one draft token is not "
                "supported under decode context parallelism"
            )
        return self.inner.forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope=q_rope, k_rope=k_rope
        )
