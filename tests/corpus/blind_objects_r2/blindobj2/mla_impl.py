# FlashInfer MLA decode variants for flattened non-causal draft blocks.
from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
)


def expand_rows(decode, num_rows: int) -> torch.Tensor:
    """Map each flattened query row to its request via the device offsets."""
    cu = decode.query_start_loc
    rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
    return torch.searchsorted(cu[1:], rows, right=True).clamp_(
        max=decode.block_table.shape[0] - 1
    )


class _KernelMixin:
    def _kernel(self, q, kv_c_and_k_pe_cache, attn_metadata, block_table, seq_lens,
                **extra_kwargs):
        return_lse = self.need_to_return_lse_for_decode
        return trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=self.bmm1_scale,
            bmm2_scale=self.bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )


class FlatDcpMLAImpl(_KernelMixin, FlashInferMLAImpl):
    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens, _ = self._flattened_decode_metadata(
                attn_metadata, q.shape[0]
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
                backend="cute-dsl",
            )
        out = self._kernel(q, kv_c_and_k_pe_cache, attn_metadata, block_table,
                           seq_lens, **extra)
        o, lse = out if self.need_to_return_lse_for_decode else (out, None)
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class FlatDcpFixedMLAImpl(_KernelMixin, FlashInferMLAImpl):
    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            block_table, seq_lens, row_req = self._flattened_decode_metadata(
                attn_metadata, q.shape[0]
            )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            kv_global = decode.dcp_tot_seq_lens
            if row_req is not None:
                kv_global = kv_global[row_req]
            extra.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=kv_global,
                backend="cute-dsl",
            )
        out = self._kernel(q, kv_c_and_k_pe_cache, attn_metadata, block_table,
                           seq_lens, **extra)
        o, lse = out if self.need_to_return_lse_for_decode else (out, None)
        return o.view(-1, o.shape[-2], o.shape[-1]), lse


class UniformFlatMLAImpl(_KernelMixin, FlashInferMLAImpl):
    """Assumes uniform query blocks (DFlash) when flattening."""

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: SG202
    def _decode_flat_dcp(self, q, kv_c_and_k_pe_cache, attn_metadata):
        decode = attn_metadata.decode
        num_rows = q.shape[0]
        row_req = expand_rows(decode, num_rows)
        block_table = decode.block_table[row_req]
        seq_lens = decode.seq_lens[row_req]
        q_len = num_rows // attn_metadata.num_decodes
        kv_global = decode.dcp_tot_seq_lens.repeat_interleave(q_len)
        return self._kernel(
            q.unsqueeze(1), kv_c_and_k_pe_cache, attn_metadata, block_table,
            seq_lens, enable_dcp=True, cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank, causal_seqlens_kv_global=kv_global,
        )

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: clean
    def _decode_flat_dcp_same_map(self, q, kv_c_and_k_pe_cache, attn_metadata):
        decode = attn_metadata.decode
        num_rows = q.shape[0]
        row_req = expand_rows(decode, num_rows)
        per_req = {
            "block_table": decode.block_table,
            "seq_lens": decode.seq_lens,
            "kv_global": decode.dcp_tot_seq_lens,
        }
        per_row = {k: v[row_req] for k, v in per_req.items()}
        return self._kernel(
            q.unsqueeze(1), kv_c_and_k_pe_cache, attn_metadata,
            per_row["block_table"], per_row["seq_lens"], enable_dcp=True,
            cp_world=self.dcp_world_size, cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=per_row["kv_global"],
        )

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: clean
    def _decode_flat_uniform_both(self, q, kv_c_and_k_pe_cache, attn_metadata):
        decode = attn_metadata.decode
        q_len = q.shape[0] // attn_metadata.num_decodes
        # Uniform blocks only (asserted by the DFlash drafter); every tensor
        # goes through the same expansion.
        expand = lambda t: t.repeat_interleave(q_len, dim=0)  # noqa: E731
        return self._kernel(
            q.unsqueeze(1), kv_c_and_k_pe_cache, attn_metadata,
            expand(decode.block_table), expand(decode.seq_lens), enable_dcp=True,
            cp_world=self.dcp_world_size, cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=expand(decode.dcp_tot_seq_lens),
        )

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl._flattened_decode_metadata
    # expect: SG202
    def _decode_flat_dcp_tiled(self, q, kv_c_and_k_pe_cache, attn_metadata):
        decode = attn_metadata.decode
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        reps = q.shape[0] // attn_metadata.num_decodes
        return self._kernel(
            q.unsqueeze(1), kv_c_and_k_pe_cache, attn_metadata, block_table,
            seq_lens, enable_dcp=True, cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=decode.dcp_tot_seq_lens.repeat(reps),
        )


class CachedRowMapMLAImpl(_KernelMixin, FlashInferMLAImpl):
    """Caches the DCP global lengths per layer group."""

    def _global_lens(self, attn_metadata) -> torch.Tensor:
        decode = attn_metadata.decode
        cached = getattr(self, "_kv_global_cache", None)
        if cached is None or cached[0] is not decode:
            self._kv_global_cache = (decode, decode.dcp_tot_seq_lens)
        return self._kv_global_cache[1]

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def _decode_noncausal(self, q, kv_c_and_k_pe_cache, attn_metadata):
        q = q.unsqueeze(1)
        block_table, seq_lens, _row_req = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        kwargs = dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=self._global_lens(attn_metadata),
        )
        return self._kernel(q, kv_c_and_k_pe_cache, attn_metadata, block_table,
                            seq_lens, **kwargs)

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def _decode_noncausal_rowmapped(self, q, kv_c_and_k_pe_cache, attn_metadata):
        q = q.unsqueeze(1)
        block_table, seq_lens, row_req = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        kwargs = dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=self._global_lens(attn_metadata)[row_req],
        )
        return self._kernel(q, kv_c_and_k_pe_cache, attn_metadata, block_table,
                            seq_lens, **kwargs)

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def _decode_uniform_dcp(self, q, kv_c_and_k_pe_cache, attn_metadata):
        # Causal uniform path: one row per request, nothing flattened.
        q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        decode = attn_metadata.decode
        return self._kernel(
            q, kv_c_and_k_pe_cache, attn_metadata, decode.block_table,
            decode.seq_lens, enable_dcp=True, cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=self._global_lens(attn_metadata),
        )

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: SG202
    def _decode_noncausal_prev_map(self, q, kv_c_and_k_pe_cache, attn_metadata):
        q = q.unsqueeze(1)
        prev_row_req = getattr(self, "_prev_row_req", None)
        block_table, seq_lens, row_req = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        kv_global = attn_metadata.decode.dcp_tot_seq_lens
        if prev_row_req is not None:
            # Reuse the previous layer's gather to save a kernel launch.
            kv_global = kv_global[prev_row_req]
        else:
            kv_global = kv_global[row_req]
        self._prev_row_req = row_req
        return self._kernel(
            q, kv_c_and_k_pe_cache, attn_metadata, block_table, seq_lens,
            enable_dcp=True, cp_world=self.dcp_world_size, cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=kv_global,
        )

    # idiom: vllm v1/attention/backends/mla/flashinfer_mla.py FlashInferMLAImpl.forward_mqa
    # expect: clean
    def _decode_noncausal_no_dcp(self, q, kv_c_and_k_pe_cache, attn_metadata):
        q = q.unsqueeze(1)
        block_table, seq_lens, _ = self._flattened_decode_metadata(
            attn_metadata, q.shape[0]
        )
        if self.dcp_world_size > 1:
            raise NotImplementedError("use _decode_noncausal_rowmapped with DCP")
        return self._kernel(q, kv_c_and_k_pe_cache, attn_metadata, block_table,
                            seq_lens)
