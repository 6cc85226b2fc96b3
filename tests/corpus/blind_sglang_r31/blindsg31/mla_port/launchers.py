"""Registered MLA decode launchers for the vendor port.

Each launcher receives the backend instance (a ``TRTLLMMLABackend`` or one of
the port's subclasses) plus the prepared query / KV cache, builds the length
arguments, and launches through ``kernel_shim`` or flashinfer directly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg31.mla_port import kernel_shim
from blindsg31.mla_port.lengths import int32_lens, local_lens, local_max_len
from blindsg31.mla_port.metadata import build_layer_meta_local
from blindsg31.mla_port.registry import register_mla_launcher

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def _kv_cache(backend: "TRTLLMMLABackend", layer: "RadixAttention") -> torch.Tensor:
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    return paged_row_view(k_cache, backend.page_size).unsqueeze(1)


def _dims(backend: "TRTLLMMLABackend", layer: "RadixAttention") -> dict:
    return dict(
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )


# idiom: layers/attention/aiter_backend.py AiterAttnBackend._forward_mla_decode; builds the aiter kv_indptr from forward_batch.seq_lens and launches mla_decode_fwd with LSE for the DCP merge
# expect: SG203
@register_mla_launcher("aiter_asm_decode")
def launch_aiter_asm_decode(backend, q, layer, forward_batch: "ForwardBatch", k_descale=None):
    fm = backend.forward_metadata
    bs = forward_batch.batch_size
    dcp = get_parallel().dcp_enabled
    kv_indptr = kernel_shim.csr_from_lens(forward_batch.seq_lens[:bs])
    out = q.new_empty((bs, layer.tp_q_head_num, layer.v_head_dim))
    k_buffer = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    _, lse = kernel_shim.aiter_mla_decode(
        q.view(bs, layer.tp_q_head_num, layer.qk_head_dim),
        k_buffer.view(-1, 1, 1, layer.qk_head_dim),
        out,
        fm.qo_indptr,
        kv_indptr,
        fm.kv_indices,
        fm.kv_last_page_len,
        1,
        sm_scale=layer.scaling,
        logit_cap=layer.logit_cap,
        return_lse=dcp,
        q_scale=k_descale,
        kv_scale=k_descale,
    )
    return (out, lse) if dcp else out


# idiom: layers/attention/aiter_backend.py AiterAttnBackend._forward_decode_dcp; builds the aiter kv_indptr from this rank's DCP share and launches mla_decode_fwd
# expect: clean
@register_mla_launcher("aiter_asm_decode_dcp")
def launch_aiter_asm_decode_local(backend, q, layer, forward_batch: "ForwardBatch", k_descale=None):
    fm = backend.forward_metadata
    bs = forward_batch.batch_size
    dcp = get_parallel().dcp_enabled
    kv_indptr = kernel_shim.csr_from_lens(local_lens(forward_batch.seq_lens[:bs]))
    out = q.new_empty((bs, layer.tp_q_head_num, layer.v_head_dim))
    k_buffer = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    _, lse = kernel_shim.aiter_mla_decode(
        q.view(bs, layer.tp_q_head_num, layer.qk_head_dim),
        k_buffer.view(-1, 1, 1, layer.qk_head_dim),
        out,
        fm.qo_indptr,
        kv_indptr,
        fm.kv_indices,
        fm.kv_last_page_len,
        1,
        sm_scale=layer.scaling,
        logit_cap=layer.logit_cap,
        return_lse=dcp,
        q_scale=k_descale,
        kv_scale=k_descale,
    )
    return (out, lse) if dcp else out


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; single-token decode launch fed forward_batch.seq_lens with the DCP LSE requested
# expect: SG203
@register_mla_launcher("trtllm_gen_decode")
def launch_trtllm_gen_decode(backend, query, layer, forward_batch: "ForwardBatch"):
    metadata = backend.forward_decode_metadata
    dcp = get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    return kernel_shim.trtllm_gen_mla_decode(
        query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        metadata.block_kv_indices,
        forward_batch.seq_lens[:bs],
        metadata.max_seq_len_k,
        return_lse=dcp,
        **_dims(backend, layer),
    )


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP hoist); per-layer meta built from this rank's lengths, single-token launch
# expect: clean
@register_mla_launcher("trtllm_gen_decode_meta")
def launch_trtllm_gen_decode_meta(backend, query, layer, forward_batch: "ForwardBatch"):
    bs = forward_batch.batch_size
    block_kv_indices = backend.forward_decode_metadata.block_kv_indices
    meta = build_layer_meta_local(
        block_kv_indices, forward_batch.seq_lens[:bs], backend.max_context_len
    )
    return kernel_shim.trtllm_gen_mla_decode(
        query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        meta.block_kv_indices,
        meta.kernel_seq_lens,
        meta.max_seq_len_k,
        return_lse=get_parallel().dcp_enabled,
        **_dims(backend, layer),
    )


# idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; target-verify launch with local lengths and the global causal bound
# expect: clean
@register_mla_launcher("cute_dsl_verify")
def launch_cute_dsl_verify(backend, q, layer, forward_batch: "ForwardBatch"):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = forward_batch.seq_lens[:bs] + ndt
    query = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
    if not parallel.dcp_enabled:
        return kernel_shim.trtllm_gen_mla_decode(
            query,
            _kv_cache(backend, layer),
            backend.workspace_buffer,
            backend.forward_decode_metadata.block_kv_indices,
            global_lens,
            backend.max_context_len + ndt,
            **_dims(backend, layer),
        )
    return kernel_shim.cute_dsl_mla_decode_dcp(
        query,
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        backend.forward_decode_metadata.block_kv_indices,
        local_lens(global_lens),
        local_max_len(backend.max_context_len + ndt),
        causal_seqlens_kv_global=global_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        **_dims(backend, layer),
    )


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target verify); multi-token verify launch on trtllm-gen with local lengths, no causal bound
# expect: SG203
@register_mla_launcher("trtllm_gen_verify")
def launch_trtllm_gen_verify(backend, q, layer, forward_batch: "ForwardBatch"):
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = forward_batch.seq_lens[:bs] + ndt
    return kernel_shim.trtllm_gen_mla_decode(
        q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        backend.forward_decode_metadata.block_kv_indices,
        local_lens(global_lens),
        local_max_len(backend.max_context_len + ndt),
        return_lse=get_parallel().dcp_enabled,
        **_dims(backend, layer),
    )


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal); multi-token verify refuses DCP, otherwise whole lengths
# expect: clean
@register_mla_launcher("trtllm_gen_verify_guarded")
def launch_trtllm_gen_verify_guarded(backend, q, layer, forward_batch: "ForwardBatch"):
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "trtllm-gen has no global causal bound for a DCP target verify; "
            "select the cute_dsl_verify launcher"
        )
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    return kernel_shim.trtllm_gen_mla_decode(
        q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        backend.forward_decode_metadata.block_kv_indices,
        forward_batch.seq_lens[:bs] + ndt,
        backend.max_context_len + ndt,
        **_dims(backend, layer),
    )


# ---------------------------------------------------------------------------
# Length functions bound at construction (closures).
# ---------------------------------------------------------------------------
def make_kernel_lens_fn(localize: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    if localize:
        return local_lens

    def _as_kernel_lens(seq_lens: torch.Tensor) -> torch.Tensor:
        return int32_lens(seq_lens)

    return _as_kernel_lens


class ClosureDecodeLauncher:
    def __init__(self, backend):
        self.backend = backend
        # The DCP page table is built rank-local by create_mla_kv_page_table_for_dcp,
        # so the lengths only need the dtype fix-up here.
        self._lens_fn = make_kernel_lens_fn(localize=False)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; kernel lengths from a closure bound in __init__ that does not localize
    # expect: SG203
    def launch(self, query, layer, forward_batch: "ForwardBatch"):
        backend = self.backend
        bs = forward_batch.batch_size
        md = backend.forward_decode_metadata
        return kernel_shim.trtllm_gen_mla_decode(
            query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            _kv_cache(backend, layer),
            backend.workspace_buffer,
            md.block_kv_indices,
            self._lens_fn(forward_batch.seq_lens[:bs]),
            md.max_seq_len_k,
            return_lse=get_parallel().dcp_enabled,
            **_dims(backend, layer),
        )


class LocalClosureDecodeLauncher:
    def __init__(self, backend):
        self.backend = backend
        self._lens_fn = make_kernel_lens_fn(localize=get_parallel().dcp_enabled)

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; kernel lengths from a closure bound to the DCP-localizing helper
    # expect: clean
    def launch(self, query, layer, forward_batch: "ForwardBatch"):
        backend = self.backend
        bs = forward_batch.batch_size
        md = backend.forward_decode_metadata
        return kernel_shim.trtllm_gen_mla_decode(
            query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
            _kv_cache(backend, layer),
            backend.workspace_buffer,
            md.block_kv_indices,
            self._lens_fn(forward_batch.seq_lens[:bs]),
            md.max_seq_len_k,
            return_lse=get_parallel().dcp_enabled,
            **_dims(backend, layer),
        )


# ---------------------------------------------------------------------------
# kwargs-assembled launches.
# ---------------------------------------------------------------------------
# idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; kwargs dict for trtllm_batch_decode_with_kv_cache_mla, DCP branch adds the DCP keys but keeps seq_lens whole
# expect: SG203
def launch_decode_from_kwargs(backend, query, layer, forward_batch: "ForwardBatch"):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    md = backend.forward_decode_metadata
    seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    kernel_kwargs = dict(
        query=query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        kv_cache=_kv_cache(backend, layer),
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=md.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=md.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )
    if parallel.dcp_enabled:
        kernel_kwargs.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
            return_lse=True,
        )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


# idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; kwargs dict, DCP branch swaps seq_lens for the rank-local share and adds the global bound
# expect: clean
def launch_decode_from_kwargs_local(backend, query, layer, forward_batch: "ForwardBatch"):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    md = backend.forward_decode_metadata
    seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    kernel_kwargs = dict(
        query=query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        kv_cache=_kv_cache(backend, layer),
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=md.block_kv_indices,
        seq_lens=seq_lens,
        max_seq_len=md.max_seq_len_k,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )
    if parallel.dcp_enabled:
        kernel_kwargs.update(
            seq_lens=get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
                torch.int32
            ),
            max_seq_len=local_max_len(md.max_seq_len_k),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
            return_lse=True,
        )
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kernel_kwargs)


# ---------------------------------------------------------------------------
# Length selection keyed on kernel-mode classes.
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PlainDecode:
    pass


@dataclass(frozen=True)
class TopkDraftDecode:
    topk: int = 4


@functools.singledispatch
def rank_kernel_lens(mode, seq_lens: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError(type(mode).__name__)


@rank_kernel_lens.register
def _(mode: PlainDecode, seq_lens: torch.Tensor) -> torch.Tensor:
    return local_lens(seq_lens)


@rank_kernel_lens.register
def _(mode: TopkDraftDecode, seq_lens: torch.Tensor) -> torch.Tensor:
    # One query row per draft branch; every branch attends the same prefix.
    return int32_lens(seq_lens.repeat_interleave(mode.topk))


@functools.singledispatch
def rank_kernel_lens_v2(mode, seq_lens: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError(type(mode).__name__)


@rank_kernel_lens_v2.register
def _(mode: PlainDecode, seq_lens: torch.Tensor) -> torch.Tensor:
    return local_lens(seq_lens)


@rank_kernel_lens_v2.register
def _(mode: TopkDraftDecode, seq_lens: torch.Tensor) -> torch.Tensor:
    return local_lens(seq_lens).repeat_interleave(mode.topk)


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend + _forward_decode_dcp; kernel lengths chosen by a singledispatch on the decode mode (top-k draft branch not localized)
# expect: SG203
def launch_for_mode(mode, backend, query, layer, forward_batch: "ForwardBatch"):
    md = backend.forward_decode_metadata
    lens = rank_kernel_lens(mode, forward_batch.seq_lens)
    n = lens.shape[0]
    return kernel_shim.trtllm_gen_mla_decode(
        query.view(n, 1, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        md.block_kv_indices,
        lens,
        md.max_seq_len_k,
        return_lse=get_parallel().dcp_enabled,
        **_dims(backend, layer),
    )


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend + _forward_decode_dcp; kernel lengths chosen by a singledispatch whose every mode localizes
# expect: clean
def launch_for_mode_v2(mode, backend, query, layer, forward_batch: "ForwardBatch"):
    md = backend.forward_decode_metadata
    lens = rank_kernel_lens_v2(mode, forward_batch.seq_lens)
    n = lens.shape[0]
    return kernel_shim.trtllm_gen_mla_decode(
        query.view(n, 1, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        md.block_kv_indices,
        lens,
        md.max_seq_len_k,
        return_lse=get_parallel().dcp_enabled,
        **_dims(backend, layer),
    )


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._get_dcp_local_seq_lens; localizes on every DCP rank except rank 0 ("rank 0 holds the prefix")
# expect: SG203
def launch_decode_rank_split(backend, query, layer, forward_batch: "ForwardBatch"):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    md = backend.forward_decode_metadata
    if parallel.dcp_enabled and parallel.dcp_rank != 0:
        kernel_lens = local_lens(forward_batch.seq_lens[:bs])
    else:
        # Rank 0 of the DCP group owns the prompt prefix pages.
        kernel_lens = int32_lens(forward_batch.seq_lens[:bs])
    return kernel_shim.trtllm_gen_mla_decode(
        query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        md.block_kv_indices,
        kernel_lens,
        md.max_seq_len_k,
        return_lse=parallel.dcp_enabled,
        **_dims(backend, layer),
    )


# idiom: layers/dcp/layout.py get_dcp_lens + trtllm_mla_backend.py _forward_decode_dcp; computes the rank-local lengths but launches with the whole forward_batch.seq_lens
# expect: SG203
def launch_decode_computed_local(backend, query, layer, forward_batch: "ForwardBatch"):
    parallel = get_parallel()
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens[:bs]
    md = backend.forward_decode_metadata
    if parallel.dcp_enabled:
        rank_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
        max_len = local_max_len(md.max_seq_len_k)
        backend._last_rank_lens = rank_lens  # kept for the zero-KV fixup
    else:
        max_len = md.max_seq_len_k
    return kernel_shim.trtllm_gen_mla_decode(
        query.view(bs, 1, layer.tp_q_head_num, layer.head_dim),
        _kv_cache(backend, layer),
        backend.workspace_buffer,
        md.block_kv_indices,
        seq_lens,
        max_len,
        return_lse=parallel.dcp_enabled,
        **_dims(backend, layer),
    )
