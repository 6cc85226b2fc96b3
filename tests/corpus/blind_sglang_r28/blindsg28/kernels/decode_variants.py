"""Deployment variants of the DCP MLA decode port.

Each variant overrides ``forward_decode`` of :class:`ForkDcpDecodeBase` (one
also caches lengths in ``init_forward_metadata``).
"""

from __future__ import annotations

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg28.kernels import kernels, lens
from blindsg28.kernels.dcp_decode_base import ForkDcpDecodeBase


class GlobalLensDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: rank-local page table from the metadata but the kernel lengths taken straight from forward_batch.seq_lens
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            seq_lens,
            md.max_local_len,
            counter_buffer=self._multi_ctas_kv_counter_buffer,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class MetadataGlobalDecodeBackend(ForkDcpDecodeBase):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode, twist: the metadata's whole-sequence lengths are passed as both the kernel lengths and the causal bound
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        global_lens = md.global_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            global_lens,
            md.max_local_len,
            causal_seqlens_kv_global=global_lens,
            **self._dcp_args(),
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class CuteDslDcpDecodeBackend(ForkDcpDecodeBase):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode, twist: rank-local lengths from the fork metadata plus the global causal bound through the generic helper
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        local_lens = md.local_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            causal_seqlens_kv_global=md.global_seq_lens[:bs],
            **self._dcp_args(),
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, local_lens, bs)


class LocalizedHelperDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp (seq_lens_k None fallback), twist: batch lengths are localized through lens.local_lens in another module
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        local_lens = lens.local_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            counter_buffer=self._multi_ctas_kv_counter_buffer,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, local_lens, bs)


class ChunkedDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: decode launched in request chunks (workspace cap) with per-chunk slices of forward_batch.seq_lens
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        kv_cache = self._paged_kv(layer)
        dims = self._kernel_dims(layer)
        outs, lses = [], []
        for start in range(0, bs, self.decode_chunk):
            end = min(start + self.decode_chunk, bs)
            raw_out, lse = kernels.launch_mla_decode(
                query[start:end],
                kv_cache,
                md.block_kv_indices[start:end],
                forward_batch.seq_lens[start:end],
                md.max_local_len,
                return_lse=True,
                **dims,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._rank_local_state(
            torch.cat(outs), torch.cat(lses), layer, md.local_seq_lens[:bs], bs
        )


class ChunkedLocalDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: chunked launches that slice the metadata's rank-local lengths
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        kv_cache = self._paged_kv(layer)
        dims = self._kernel_dims(layer)
        local_lens = md.local_seq_lens[:bs]
        outs, lses = [], []
        for start in range(0, bs, self.decode_chunk):
            end = min(start + self.decode_chunk, bs)
            raw_out, lse = kernels.launch_mla_decode(
                query[start:end],
                kv_cache,
                md.block_kv_indices[start:end],
                local_lens[start:end],
                md.max_local_len,
                return_lse=True,
                **dims,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._rank_local_state(
            torch.cat(outs), torch.cat(lses), layer, local_lens, bs
        )


class ClosureDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: the launch sits in a closure that captures forward_batch.seq_lens
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        kv_cache = self._paged_kv(layer)
        dims = self._kernel_dims(layer)

        def _launch(query):
            return kernels.launch_mla_decode(
                query, kv_cache, md.block_kv_indices, seq_lens, md.max_local_len,
                return_lse=True, **dims,
            )

        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = _launch(query)
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class ClosureLocalDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, twist: the closure captures lengths localized with _get_dcp_local_seq_lens
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        kv_cache = self._paged_kv(layer)
        dims = self._kernel_dims(layer)

        def _launch(query):
            return kernels.launch_mla_decode(
                query, kv_cache, md.block_kv_indices, seq_lens, md.max_local_len,
                return_lse=True, **dims,
            )

        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = _launch(query)
        return self._rank_local_state(raw_out, lse, layer, seq_lens, bs)


class PropertyLensDecodeBackend(ForkDcpDecodeBase):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self.fork_metadata.global_seq_lens

    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_decode, twist: the kernel lengths come from a property that returns the metadata's whole-sequence lengths
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            self.kernel_seq_lens[:bs],
            md.max_local_len,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class PropertyLocalLensDecodeBackend(ForkDcpDecodeBase):
    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self.fork_metadata.local_seq_lens

    # idiom: trtllm_mla_backend.TRTLLMMLABackend.forward_decode, twist: the property returns the metadata's rank-local lengths
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        local_lens = self.kernel_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, local_lens, bs)


class KwargsDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (extra_kwargs dict), twist: every launch argument travels in one kwargs dict holding the rank-local lengths
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        launch_kwargs = dict(self._kernel_dims(layer))
        launch_kwargs.update(
            block_tables=md.block_kv_indices,
            seq_lens=md.local_seq_lens[:bs],
            max_seq_len=md.max_local_len,
            return_lse=True,
        )
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query, self._paged_kv(layer), **launch_kwargs
        )
        return self._rank_local_state(
            raw_out, lse, layer, launch_kwargs["seq_lens"], bs
        )


class KwargsRebindDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._run_decode_kernel (extra_kwargs dict), twist: the kwargs dict is built before localization, which only rebinds the local name
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        parallel = get_parallel()
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        launch_kwargs = {
            "block_tables": md.block_kv_indices,
            "seq_lens": seq_lens,
            "max_seq_len": md.max_local_len,
        }
        if parallel.dcp_enabled:
            seq_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        out = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            return_lse=parallel.dcp_enabled,
            **launch_kwargs,
            **self._kernel_dims(layer),
        )
        if not parallel.dcp_enabled:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        return self._rank_local_state(raw_out, lse, layer, seq_lens, bs)


class TupleDecodeBackend(ForkDcpDecodeBase):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode (local + global lens pair), twist: (local, global) come back as a tuple from lens.split_lens and are unpacked in order
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        local_lens, global_lens = lens.split_lens(forward_batch.seq_lens[:bs])
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            causal_seqlens_kv_global=global_lens,
            **self._dcp_args(),
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, local_lens, bs)


class TupleSwapDecodeBackend(ForkDcpDecodeBase):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode, twist: lens.split_lens returns (local, global) but the tuple is unpacked as (global, local)
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        global_lens, local_lens = lens.split_lens(forward_batch.seq_lens[:bs])
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            local_lens,
            md.max_local_len,
            causal_seqlens_kv_global=global_lens,
            **self._dcp_args(),
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class FallbackLensDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp (falls back to forward_batch.seq_lens when seq_lens_k is None), twist: the fallback ternary skips localization when the fork metadata is absent (graph replay after a prefill)
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        md = self.fork_metadata
        upstream = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        block_tables = (
            md.block_kv_indices if md is not None else upstream.block_kv_indices
        )
        seq_lens = (
            md.local_seq_lens[:bs] if md is not None else forward_batch.seq_lens[:bs]
        )
        max_len = md.max_local_len if md is not None else upstream.max_seq_len_k
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            block_tables,
            seq_lens,
            max_len,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, seq_lens, bs)


class TernaryLocalDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._get_dcp_local_seq_lens, twist: an inline ternary picks get_dcp_lens under DCP and the batch lengths otherwise
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        parallel = get_parallel()
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = (
            get_dcp_lens(forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank)
            if parallel.dcp_enabled
            else forward_batch.seq_lens[:bs]
        ).to(torch.int32)
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        out = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            seq_lens,
            md.max_local_len,
            return_lse=parallel.dcp_enabled,
            **self._kernel_dims(layer),
        )
        if not parallel.dcp_enabled:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        return self._rank_local_state(raw_out, lse, layer, seq_lens, bs)


class GatedGlobalDecodeBackend(ForkDcpDecodeBase):
    # idiom: cutedsl_mla_backend.CuteDslMLABackend.forward_decode (non-DCP falls through), twist: the whole-sequence launch sits behind an early return that sends every DCP call to the rank-local base path
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if get_parallel().dcp_enabled:
            return ForkDcpDecodeBase.forward_decode(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        # Single-rank KV: the batch's lengths are this rank's lengths.
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            forward_batch.seq_lens[:bs],
            md.max_local_len,
            counter_buffer=self._multi_ctas_kv_counter_buffer,
            **self._kernel_dims(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class HostLensDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend.init_forward_metadata (seq_lens_cpu for max_seq), twist: kernel lengths uploaded from forward_batch.seq_lens_cpu to skip a device cast
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        if forward_batch.seq_lens_cpu is not None:
            seq_lens = forward_batch.seq_lens_cpu[:bs].to(
                query.device, dtype=torch.int32, non_blocking=True
            )
        else:
            seq_lens = md.local_seq_lens[:bs]
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            seq_lens,
            md.max_local_len,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class StepCachedLensDecodeBackend(ForkDcpDecodeBase):
    _step_seq_lens = None

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        # one int32 copy per step, reused by every MLA layer
        self._step_seq_lens = forward_batch.seq_lens[: forward_batch.batch_size].to(
            torch.int32
        )

    # idiom: trtllm_mla_backend.TRTLLMMLABackend.init_forward_metadata (hoisted int32 seq_lens_k), twist: lengths cached on self in init_forward_metadata and read by the launch in forward_decode
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            self._step_seq_lens[:bs],
            md.max_local_len,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)


class CeilDivDecodeBackend(ForkDcpDecodeBase):
    # idiom: trtllm_mla_backend.TRTLLMMLABackend._get_dcp_local_max_seq_len, twist: per-request lengths "localized" with ceil(len / dcp_size), which overstates the share of ranks past the remainder
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
        k_rope=None, cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        md = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        global_lens = md.global_seq_lens[:bs]
        seq_lens = torch.div(
            global_lens + parallel.dcp_size - 1, parallel.dcp_size, rounding_mode="floor"
        ).to(torch.int32)
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        raw_out, lse = kernels.launch_mla_decode(
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            seq_lens,
            md.max_local_len,
            return_lse=True,
            **self._kernel_dims(layer),
        )
        return self._rank_local_state(raw_out, lse, layer, md.local_seq_lens[:bs], bs)
