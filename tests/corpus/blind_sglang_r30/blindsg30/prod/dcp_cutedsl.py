"""Production patches on the cute-dsl MLA backend (the DCP-capable kernel)."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg30.prod import mla_kernels as mk
from blindsg30.utils import dcp_lens as dl

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner


class StartupCuteDslMLABackend(mk.MLAQueryMixin, CuteDslMLABackend):
    # The "cpu" decode variant reads seq_lens_cpu; opt back into the D2H mirror.
    needs_cpu_seq_lens: bool = True

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        env = os.environ
        self.decode_impl = env.get("STARTUP_CUTEDSL_DECODE", "meta")
        self.verify_impl = env.get("STARTUP_CUTEDSL_VERIFY", "bounded")
        self.draft_extend_impl = env.get("STARTUP_CUTEDSL_DRAFT_EXTEND", "bounded")
        self._decode_table = {
            "global_meta": self.forward_decode_global_meta,
            "meta": self.forward_decode_meta,
            "partial": self.forward_decode_partial,
            "partial_local": self.forward_decode_partial_local,
            "cpu": self.forward_decode_from_cpu,
        }
        self._verify_table = {
            "bounded": self.forward_verify_dcp,
            "unbounded": self.forward_verify_no_bound,
        }
        self._draft_extend_table = {
            "plain": self.forward_draft_extend_dcp,
            "bounded": self.forward_draft_extend_bounded,
        }

    def _meta(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not get_parallel().dcp_enabled or cos_sin_cache is not None:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache,
                                          q_rope, k_rope, cos_sin_cache, is_neox,
                                          llama_4_scaling)
        return self._decode_table[self.decode_impl](
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and cos_sin_cache is None and q_rope is not None:
            if mode.is_target_verify():
                return self._verify_table[self.verify_impl](
                    q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
                )
            if mode.is_draft_extend_v2() and q.shape[0] % max(forward_batch.batch_size, 1) == 0:
                return self._draft_extend_table[self.draft_extend_impl](
                    q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
                )
        return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache,
                                      q_rope, k_rope, cos_sin_cache, is_neox,
                                      llama_4_scaling)

    # ------------------------------------------------------------- decode
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; metadata.global_seq_lens_k passed as both seq_lens and causal_seqs
    # expect: SG203
    def forward_decode_global_meta(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        bs = forward_batch.batch_size
        glob = meta.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=glob,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            causal_seqs=glob,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, glob, layer)

    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode; metadata.seq_lens_k (rank-local after init) + global causal bound
    # expect: clean
    def forward_decode_meta(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        bs = forward_batch.batch_size
        local_lens = meta.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            causal_seqs=meta.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, local_lens, layer)

    # idiom: layers/attention/cutedsl_mla_backend.py _run_decode_kernel via functools.partial bound with forward_batch.seq_lens
    # expect: SG203
    def forward_decode_partial(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        seq_lens = forward_batch.seq_lens[: forward_batch.batch_size]
        run = functools.partial(
            self._run_decode_kernel,
            seq_lens=seq_lens,
            causal_seqs=seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        raw_out, lse = run(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer)

    # idiom: layers/attention/cutedsl_mla_backend.py _run_decode_kernel via functools.partial bound with dcp_lens.local_lens
    # expect: clean
    def forward_decode_partial_local(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        glob = forward_batch.seq_lens[: forward_batch.batch_size]
        local = dl.local_lens(glob)
        run = functools.partial(
            self._run_decode_kernel,
            seq_lens=local,
            causal_seqs=glob,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        raw_out, lse = run(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
        )
        return self._finish_dcp(raw_out, lse, local, layer)

    # idiom: layers/attention/flashinfer_mla_backend.py seq_lens_cpu host mirror; lens copied from seq_lens_cpu to the device, used as seq_lens
    # expect: SG203
    def forward_decode_from_cpu(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        meta = self._meta(forward_batch)
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens_cpu[:bs].to(query.device, non_blocking=True)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=lens,
            max_seq_len=meta.max_seq_len_k,
            layer=layer,
            causal_seqs=lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, lens, layer)

    # ------------------------------------------------------------- verify
    # idiom: layers/attention/trtllm_mla_backend.py forward_extend DCP target-verify arm; rank-local lens plus causal_seqs=global_seq_lens_k
    # expect: clean
    def forward_verify_dcp(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        ndt = forward_batch.spec_info.draft_token_num
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=ndt)
        meta = self._meta(forward_batch)
        raw_out, lse = self._run_decode_kernel(
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

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend DCP target-verify arm; local lens via dcp_lens, generic launcher, no global causal bound
    # expect: SG203
    def forward_verify_no_bound(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=ndt)
        meta = self._meta(forward_batch)
        glob = dl.verify_global_lens(forward_batch.seq_lens[:bs], ndt)
        lens = dl.local_lens(glob) if parallel.dcp_enabled else glob
        raw_out, lse = mk.launch_trtllm_mla(
            self,
            query,
            self._kv_cache(layer),
            meta.block_kv_indices,
            lens,
            meta.max_seq_len_k,
            layer,
            return_lse=True,
            kernel="cute-dsl",
        )
        return self._finish_dcp(raw_out, lse, lens, layer, tokens_per_req=ndt)

    # ------------------------------------------------------- draft extend
    # idiom: layers/attention/trtllm_mla_backend.py forward_extend draft-extend arm; asks dcp_enabled, rank-local lens, direct cute-dsl launch without enable_dcp/causal bound
    # expect: SG203
    def forward_draft_extend_dcp(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=tokens_per_seq)
        meta = self._meta(forward_batch)
        if parallel.dcp_enabled:
            seq_lens = meta.seq_lens_k
        else:
            seq_lens = meta.global_seq_lens_k if meta.global_seq_lens_k is not None else meta.seq_lens_k
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=meta.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=meta.max_seq_len_k + tokens_per_seq,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, seq_lens, layer, tokens_per_req=tokens_per_seq)

    # idiom: layers/attention/cutedsl_mla_backend.py _run_decode_kernel; draft extend under DCP with causal_seqs=global_seq_lens_k
    # expect: clean
    def forward_draft_extend_bounded(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        query = self._mla_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope, tokens_per_req=tokens_per_seq)
        meta = self._meta(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=meta.block_kv_indices,
            seq_lens=meta.seq_lens_k,
            max_seq_len=meta.max_seq_len_k + tokens_per_seq,
            layer=layer,
            causal_seqs=meta.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, meta.seq_lens_k, layer, tokens_per_req=tokens_per_seq)
