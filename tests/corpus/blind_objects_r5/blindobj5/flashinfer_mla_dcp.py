# SPDX-License-Identifier: Apache-2.0
"""FlashInfer MLA decode for DSpark draft blocks under decode context
parallelism (DCP).

FlashInfer's decode kernel has no causal flag, so a non-causal DSpark query
block is flattened into one decode row per query token: the block table and
the rank-local sequence lengths are expanded to one row per token. Under DCP
the native context-parallel kernel also takes the *global* causal bound
(``causal_seqlens_kv_global``), which must follow the same row map.
"""

from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
from flashinfer.decode import (
    trtllm_batch_decode_with_kv_cache_mla as _fi_mla_decode,
)

from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.flashinfer_mla import (
    FlashInferMLADecodeMetadata,
    FlashInferMLAImpl,
    FlashInferMLAMetadata,
    _get_workspace_buffer,
)


def _row_req(decode: FlashInferMLADecodeMetadata, num_rows: int) -> torch.Tensor:
    """Request index of every flattened decode row (ragged-safe)."""
    cu = decode.query_start_loc
    assert cu is not None
    rows = torch.arange(num_rows, device=cu.device, dtype=cu.dtype)
    return torch.searchsorted(cu[1:], rows, right=True).clamp_(
        max=decode.block_table.shape[0] - 1
    )


def _scales(impl: FlashInferMLAImpl, layer: AttentionLayer) -> tuple[float, float]:
    if impl.bmm1_scale is None:
        impl.bmm1_scale = impl.scale
    if impl.bmm2_scale is None:
        impl.bmm2_scale = 1.0
    return impl.bmm1_scale, impl.bmm2_scale


def _as_query(q: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    if isinstance(q, tuple):
        return torch.cat(q, dim=-1)
    return q


def _finish(kernel_out: Any, return_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    if return_lse:
        o, lse = kernel_out
        lse = lse.view(-1, lse.shape[-1])
    else:
        o, lse = kernel_out, None
    return o.view(-1, o.shape[-2], o.shape[-1]), lse


@dataclass
class _DecodeRows:
    """Block table and sequence lengths expanded to one row per query token."""

    block_table: torch.Tensor
    seq_lens: torch.Tensor

    @classmethod
    def flatten(cls, decode: FlashInferMLADecodeMetadata, num_rows: int) -> "_DecodeRows":
        row_req = _row_req(decode, num_rows)
        return cls(decode.block_table[row_req], decode.seq_lens[row_req])


# ---------------------------------------------------------------------------
# Impl subclasses
# ---------------------------------------------------------------------------


class DSpark028FlashInferMLAImpl(FlashInferMLAImpl):
    """Backport of the 0.28-era DSpark non-causal path onto 0.33's flattening."""

    # idiom: FlashInferMLAImpl.forward_mqa before the DCP fix: block_table/seq_lens from _flattened_decode_metadata (row map unpacked into `_` and dropped), causal_seqlens_kv_global = decode.dcp_tot_seq_lens left per request
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        q = _as_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        multi_token_decode = (
            attn_metadata.decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
                block_table, seq_lens, _ = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        bmm1_scale, bmm2_scale = _scales(self, layer)
        return_lse = self.need_to_return_lse_for_decode
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=attn_metadata.decode.dcp_tot_seq_lens,
                backend="cute-dsl",
            )
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return _finish(kernel_out, return_lse)


class SeedStyleFlashInferMLAImpl(FlashInferMLAImpl):
    """The DCP-fix PR's repeat_interleave expansion merged onto 0.33's ragged
    flattening."""

    # idiom: block_table/seq_lens flattened by the searchsorted row map (0.33.0) while causal_seqlens_kv_global is expanded with repeat_interleave(query_len) (the fix PR's uniform map): two different row maps on ragged batches
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        q = _as_query(q).unsqueeze(1)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
        non_causal_block = not attn_metadata.causal and query_len > 1
        if non_causal_block:
            row_req = _row_req(decode, q.shape[0])
            block_table = decode.block_table[row_req]
            seq_lens = decode.seq_lens[row_req]
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            assert self.cp_kv_cache_interleave_size == 1
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if non_causal_block:
                causal_seqlens_kv_global = causal_seqlens_kv_global.repeat_interleave(
                    query_len
                )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
        bmm1_scale, bmm2_scale = _scales(self, layer)
        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return _finish(kernel_out, return_lse)


class PromisedBoundFlashInferMLAImpl(FlashInferMLAImpl):
    """Expands the global bound only when the promised query bound says so."""

    # idiom: tables flattened under multi_token_decode (max_query_len > 1 OR num_decode_tokens > num_decodes) but the global bound only under decode.max_query_len > 1: on the other disjunct the bound stays per request
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        q = _as_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        multi_token_decode = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        row_req = None
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            bound = decode.dcp_tot_seq_lens
            assert bound is not None
            if row_req is not None and decode.max_query_len > 1:
                bound = bound[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=bound,
                backend="cute-dsl",
            )
        bmm1_scale, bmm2_scale = _scales(self, layer)
        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return _finish(kernel_out, return_lse)


class EarlyKwargsFlashInferMLAImpl(FlashInferMLAImpl):
    """Builds the DCP launch kwargs up front, once per forward."""

    def _dcp_launch_kwargs(self, attn_metadata: FlashInferMLAMetadata) -> dict[str, Any]:
        if self.dcp_world_size == 1:
            return {}
        assert attn_metadata.decode is not None
        return dict(
            enable_dcp=True,
            cp_world=self.dcp_world_size,
            cp_rank=self.dcp_rank,
            causal_seqlens_kv_global=attn_metadata.decode.dcp_tot_seq_lens,
            backend="cute-dsl",
        )

    # idiom: launch kwargs (with causal_seqlens_kv_global) built by a helper method as dict(...) before the non-causal flattening, then splatted as **kwargs into the launch with the flattened tables
    # expect: SG202
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        launch_kwargs = self._dcp_launch_kwargs(attn_metadata)
        q = _as_query(q)
        block_table = attn_metadata.decode.block_table
        seq_lens = attn_metadata.decode.seq_lens
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if attn_metadata.num_decode_tokens > attn_metadata.num_decodes:
                block_table, seq_lens, _row = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        bmm1_scale, bmm2_scale = _scales(self, layer)
        return_lse = self.need_to_return_lse_for_decode
        launch_kwargs.update(
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
        )
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            return_lse=return_lse,
            **launch_kwargs,
        )
        return _finish(kernel_out, return_lse)


class UpstreamRowMapFlashInferMLAImpl(FlashInferMLAImpl):
    """0.33's non-causal DCP path, kept as the fork's reference."""

    # idiom: FlashInferMLAImpl.forward_mqa (0.33.0): _flattened_decode_metadata returns (block_table, seq_lens, row_req) and the global bound is indexed by the same row_req
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        q = _as_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        row_req: torch.Tensor | None = None
        multi_token_decode = (
            decode.max_query_len > 1
            or attn_metadata.num_decode_tokens > attn_metadata.num_decodes
        )
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if multi_token_decode:
                block_table, seq_lens, row_req = self._flattened_decode_metadata(
                    attn_metadata, q.shape[0]
                )
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if row_req is not None:
                causal_seqlens_kv_global = causal_seqlens_kv_global[row_req]
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
                backend="cute-dsl",
            )
        bmm1_scale, bmm2_scale = _scales(self, layer)
        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return _finish(kernel_out, return_lse)


class UniformInterleaveFlashInferMLAImpl(FlashInferMLAImpl):
    """The DCP-fix PR's uniform-block path (DSpark blocks are always N wide)."""

    # idiom: the DCP fix PR's forward_mqa: block_table, seq_lens AND causal_seqlens_kv_global all repeat_interleave(query_len) under the same `not causal and query_len > 1` condition
    # expect: clean
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: FlashInferMLAMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        decode = attn_metadata.decode
        assert decode is not None
        q = _as_query(q)
        block_table, seq_lens = decode.block_table, decode.seq_lens
        query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
        expand = not attn_metadata.causal and query_len > 1
        if not attn_metadata.causal:
            q = q.unsqueeze(1)
            if expand:
                block_table = block_table.repeat_interleave(query_len, dim=0)
                seq_lens = seq_lens.repeat_interleave(query_len)
        else:
            q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
        extra_kwargs: dict[str, Any] = {}
        if self.dcp_world_size > 1:
            causal_seqlens_kv_global = decode.dcp_tot_seq_lens
            assert causal_seqlens_kv_global is not None
            if expand:
                causal_seqlens_kv_global = causal_seqlens_kv_global.repeat_interleave(
                    query_len
                )
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                causal_seqlens_kv_global=causal_seqlens_kv_global,
            )
        bmm1_scale, bmm2_scale = _scales(self, layer)
        return_lse = self.need_to_return_lse_for_decode
        kernel_out = trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_c_and_k_pe_cache.unsqueeze(1),
            workspace_buffer=_get_workspace_buffer(return_lse),
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_table,
            seq_lens=seq_lens,
            max_seq_len=attn_metadata.max_seq_len,
            bmm1_scale=bmm1_scale,
            bmm2_scale=bmm2_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )
        return _finish(kernel_out, return_lse)


# ---------------------------------------------------------------------------
# Module-level launchers (used by the Kimi-K3 prepared-decode path)
# ---------------------------------------------------------------------------


def _make_dcp_launcher(
    impl: FlashInferMLAImpl,
    decode: FlashInferMLADecodeMetadata,
    return_lse: bool,
) -> Any:
    """Bind the per-forward constants of the MLA decode launch."""
    return partial(
        trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        return_lse=return_lse,
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
        backend="cute-dsl",
    )


# idiom: functools.partial of trtllm_batch_decode_with_kv_cache_mla built by a helper with causal_seqlens_kv_global bound per request, called after block_table/seq_lens were expanded by the row map
# expect: SG202
def dspark_dcp_decode_bound_launcher(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None and impl.dcp_world_size > 1
    return_lse = impl.need_to_return_lse_for_decode
    launch = _make_dcp_launcher(impl, decode, return_lse)
    q = q.unsqueeze(1)
    block_table, seq_lens, _ = impl._flattened_decode_metadata(attn_metadata, q.shape[0])
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    kernel_out = launch(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
    )
    return _finish(kernel_out, return_lse)


# idiom: partial-bound launcher where the constants are bound up front but causal_seqlens_kv_global is passed at call time, after indexing it with the walrus-bound row map used for the tables
# expect: clean
def dspark_dcp_decode_late_bound(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None and decode.dcp_tot_seq_lens is not None
    return_lse = impl.need_to_return_lse_for_decode
    launch = partial(
        trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        return_lse=return_lse,
    )
    q = q.unsqueeze(1)
    block_table, seq_lens, bound = decode.block_table, decode.seq_lens, decode.dcp_tot_seq_lens
    if (row_req := _row_req(decode, q.shape[0])) is not None:
        block_table, seq_lens, bound = (
            block_table[row_req],
            seq_lens[row_req],
            bound[row_req],
        )
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    kernel_out = launch(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        enable_dcp=impl.dcp_world_size > 1,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        causal_seqlens_kv_global=bound,
        backend="cute-dsl",
    )
    return _finish(kernel_out, return_lse)


# idiom: launch through an import alias (_fi_mla_decode); tables come from a holder dataclass (_DecodeRows.flatten) expanded per token, the global bound read straight from decode.dcp_tot_seq_lens
# expect: SG202
def dspark_dcp_decode_rows(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None
    q = q.unsqueeze(1)
    rows = _DecodeRows.flatten(decode, q.shape[0])
    return_lse = impl.need_to_return_lse_for_decode
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    kernel_out = _fi_mla_decode(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=rows.block_table,
        seq_lens=rows.seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        return_lse=return_lse,
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
        backend="cute-dsl",
    )
    return _finish(kernel_out, return_lse)


# idiom: uniform DSpark block: block_table/seq_lens repeat_interleave(query_len) but the global bound tiled with .repeat(query_len) (request-major vs token-major rows: a different row map)
# expect: SG202
def dspark_dcp_decode_tiled(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None and decode.dcp_tot_seq_lens is not None
    query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
    q = q.unsqueeze(1)
    block_table = decode.block_table.repeat_interleave(query_len, dim=0)
    seq_lens = decode.seq_lens.repeat_interleave(query_len)
    causal_seqlens_kv_global = decode.dcp_tot_seq_lens.repeat(query_len)
    return_lse = impl.need_to_return_lse_for_decode
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    kernel_out = trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=block_table,
        seq_lens=seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        return_lse=return_lse,
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        causal_seqlens_kv_global=causal_seqlens_kv_global,
        backend="cute-dsl",
    )
    return _finish(kernel_out, return_lse)


# idiom: SGLang dsa_dcp chunked launch loop (for start in range(0, rows, step)): flattened block_tables/seq_lens sliced per row chunk, the per-request global bound sliced with the same [start:end]
# expect: SG202
def dspark_dcp_decode_chunked(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
    max_rows_per_launch: int = 4096,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None and decode.dcp_tot_seq_lens is not None
    q = q.unsqueeze(1)
    rows = q.shape[0]
    block_table, seq_lens, _ = impl._flattened_decode_metadata(attn_metadata, rows)
    bound = decode.dcp_tot_seq_lens
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    attention_kwargs = dict(
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(True),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        return_lse=True,
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        backend="cute-dsl",
    )
    outputs, lses = [], []
    for start in range(0, rows, max_rows_per_launch):
        end = min(start + max_rows_per_launch, rows)
        o, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=q[start:end],
            block_tables=block_table[start:end],
            seq_lens=seq_lens[start:end],
            causal_seqlens_kv_global=bound[start:end],
            **attention_kwargs,
        )
        outputs.append(o)
        lses.append(lse)
    return _finish((torch.cat(outputs), torch.cat(lses)), True)


# idiom: same SGLang-style chunked loop with the global bound first expanded by the row_req of the flattening, then sliced per chunk exactly like the tables
# expect: clean
def dspark_dcp_decode_chunked_rowmap(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
    max_rows_per_launch: int = 4096,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None and decode.dcp_tot_seq_lens is not None
    q = q.unsqueeze(1)
    rows = q.shape[0]
    block_table, seq_lens, row_req = impl._flattened_decode_metadata(
        attn_metadata, rows
    )
    bound = decode.dcp_tot_seq_lens[row_req]
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    attention_kwargs = dict(
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(True),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        return_lse=True,
        enable_dcp=True,
        cp_world=impl.dcp_world_size,
        cp_rank=impl.dcp_rank,
        backend="cute-dsl",
    )
    outputs, lses = [], []
    for start in range(0, rows, max_rows_per_launch):
        end = min(start + max_rows_per_launch, rows)
        o, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=q[start:end],
            block_tables=block_table[start:end],
            seq_lens=seq_lens[start:end],
            causal_seqlens_kv_global=bound[start:end],
            **attention_kwargs,
        )
        outputs.append(o)
        lses.append(lse)
    return _finish((torch.cat(outputs), torch.cat(lses)), True)


# idiom: non-causal flattening without DCP (dcp_world_size == 1): tables expanded by row_req, no causal_seqlens_kv_global passed at all
# expect: clean
def dspark_decode_no_dcp(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None
    assert impl.dcp_world_size == 1, "use the DCP launcher"
    q = q.unsqueeze(1)
    row_req = _row_req(decode, q.shape[0])
    return_lse = impl.need_to_return_lse_for_decode
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    kernel_out = trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=decode.block_table[row_req],
        seq_lens=decode.seq_lens[row_req],
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        return_lse=return_lse,
    )
    return _finish(kernel_out, return_lse)


# idiom: causal MTP verify under DCP: q viewed as [num_decodes, q_len, H, D] (trtllm q_len_per_request), tables and the global bound all stay per request
# expect: clean
def mtp_dcp_decode_causal(
    impl: FlashInferMLAImpl,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: FlashInferMLAMetadata,
    layer: AttentionLayer,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    decode = attn_metadata.decode
    assert decode is not None and attn_metadata.causal
    q = q.view(attn_metadata.num_decodes, -1, q.shape[-2], q.shape[-1])
    return_lse = impl.need_to_return_lse_for_decode
    bmm1_scale, bmm2_scale = _scales(impl, layer)
    extra_kwargs: dict[str, Any] = {}
    if impl.dcp_world_size > 1:
        extra_kwargs.update(
            enable_dcp=True,
            cp_world=impl.dcp_world_size,
            cp_rank=impl.dcp_rank,
            causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            backend="cute-dsl",
        )
    kernel_out = trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache.unsqueeze(1),
        workspace_buffer=_get_workspace_buffer(return_lse),
        qk_nope_head_dim=impl.qk_nope_head_dim,
        kv_lora_rank=impl.kv_lora_rank,
        qk_rope_head_dim=impl.qk_rope_head_dim,
        block_tables=decode.block_table,
        seq_lens=decode.seq_lens,
        max_seq_len=attn_metadata.max_seq_len,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        return_lse=return_lse,
        **extra_kwargs,
    )
    return _finish(kernel_out, return_lse)
