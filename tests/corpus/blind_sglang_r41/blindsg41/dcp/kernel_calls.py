"""Functional launchers for the MLA decode kernel under DCP.

The backend is the cute-dsl one: ``CuteDslMLABackend._run_decode_kernel``
takes rank-local ``seq_lens`` plus the global ``causal_seqs`` when
``cp_world > 1``. Metadata is built by the backend's own
``init_forward_metadata`` (rank-local ``seq_lens_k`` / page table, global
``global_seq_lens_k``).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Sequence

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


def _metadata(backend: CuteDslMLABackend, fb: ForwardBatch):
    backend.init_forward_metadata(fb)
    return fb.decode_trtllm_mla_metadata


def _cp_kwargs() -> Dict[str, Any]:
    parallel = get_parallel()
    return {"cp_world": parallel.dcp_size, "cp_rank": parallel.dcp_rank}


LENS: Dict[str, Callable[[Any, ForwardBatch], torch.Tensor]] = {
    "local": lambda md, fb: md.seq_lens_k[: fb.batch_size],
    "global": lambda md, fb: fb.seq_lens[: fb.batch_size],
}


# expect: SG203
def launch_verify_kwargs(
    backend: CuteDslMLABackend, q: torch.Tensor, kv_cache, layer, fb: ForwardBatch
):
    assert fb.forward_mode.is_target_verify()
    md = _metadata(backend, fb)
    kwargs = dict(
        block_tables=md.block_kv_indices,
        seq_lens=md.seq_lens_k,
        max_seq_len=md.max_seq_len_k,
    )
    kwargs.update(_cp_kwargs())
    kwargs.update(causal_seqs=md.seq_lens_k, return_lse=True)
    return backend._run_decode_kernel(q, kv_cache, layer=layer, **kwargs)


# expect: clean
def launch_verify_kw_dict(
    backend: CuteDslMLABackend, q: torch.Tensor, kv_cache, layer, fb: ForwardBatch
):
    assert fb.forward_mode.is_target_verify()
    md = _metadata(backend, fb)
    kwargs = dict(
        block_tables=md.block_kv_indices,
        seq_lens=md.seq_lens_k,
        max_seq_len=md.max_seq_len_k,
    )
    kwargs.update(_cp_kwargs())
    kwargs.update(causal_seqs=md.global_seq_lens_k, return_lse=True)
    return backend._run_decode_kernel(q, kv_cache, layer=layer, **kwargs)


# expect: SG203
def launch_decode_table(
    backend: CuteDslMLABackend, query: torch.Tensor, kv_cache, layer, fb: ForwardBatch
):
    assert fb.forward_mode.is_decode_or_idle()
    md = _metadata(backend, fb)
    return backend._run_decode_kernel(
        query.unsqueeze(1) if query.dim() == 3 else query,
        kv_cache,
        md.block_kv_indices,
        LENS["global"](md, fb),
        md.max_seq_len_k,
        layer,
        causal_seqs=LENS["global"](md, fb),
        return_lse=True,
        **_cp_kwargs(),
    )


# expect: clean
def launch_decode_lens_table(
    backend: CuteDslMLABackend, query: torch.Tensor, kv_cache, layer, fb: ForwardBatch
):
    assert fb.forward_mode.is_decode_or_idle()
    md = _metadata(backend, fb)
    return backend._run_decode_kernel(
        query.unsqueeze(1) if query.dim() == 3 else query,
        kv_cache,
        md.block_kv_indices,
        LENS["local"](md, fb),
        md.max_seq_len_k,
        layer,
        causal_seqs=LENS["global"](md, fb),
        return_lse=True,
        **_cp_kwargs(),
    )


# expect: SG203
def iter_layer_decodes(
    backend: CuteDslMLABackend,
    fb: ForwardBatch,
    layers: Sequence[Any],
    queries: Sequence[torch.Tensor],
    kv_caches: Sequence[torch.Tensor],
) -> Iterator[Any]:
    assert fb.forward_mode.is_decode_or_idle()
    md = _metadata(backend, fb)
    parallel = get_parallel()
    local_lens = get_dcp_lens(md.seq_lens_k, parallel.dcp_size, parallel.dcp_rank)
    for layer, query, kv_cache in zip(layers, queries, kv_caches):
        yield backend._run_decode_kernel(
            query.unsqueeze(1),
            kv_cache,
            md.block_kv_indices,
            local_lens.to(torch.int32),
            md.max_seq_len_k,
            layer,
            causal_seqs=fb.seq_lens,
            return_lse=True,
            **_cp_kwargs(),
        )


# expect: clean
def iter_layer_decodes_md(
    backend: CuteDslMLABackend,
    fb: ForwardBatch,
    layers: Sequence[Any],
    queries: Sequence[torch.Tensor],
    kv_caches: Sequence[torch.Tensor],
) -> Iterator[Any]:
    assert fb.forward_mode.is_decode_or_idle()
    md = _metadata(backend, fb)
    local_lens = md.seq_lens_k
    global_lens = (
        md.global_seq_lens_k if md.global_seq_lens_k is not None else fb.seq_lens
    )
    for layer, query, kv_cache in zip(layers, queries, kv_caches):
        yield backend._run_decode_kernel(
            query.unsqueeze(1),
            kv_cache,
            md.block_kv_indices,
            local_lens,
            md.max_seq_len_k,
            layer,
            causal_seqs=global_lens,
            return_lse=True,
            **_cp_kwargs(),
        )


# expect: SG203
def launch_draft_extend_partial(
    backend: CuteDslMLABackend, q: torch.Tensor, kv_cache, layer, fb: ForwardBatch
):
    assert fb.forward_mode.is_draft_extend_v2()
    md = _metadata(backend, fb)
    bs = fb.batch_size
    tokens_per_seq = q.shape[0] // bs
    kernel = partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        backend="cute-dsl",
    )
    return kernel(
        query=q.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim),
        kv_cache=kv_cache,
        block_tables=md.block_kv_indices,
        seq_lens=md.seq_lens_k,
        max_seq_len=md.max_seq_len_k + tokens_per_seq,
        return_lse=True,
    )


# expect: clean
def decode_layers_closure(
    backend: CuteDslMLABackend,
    fb: ForwardBatch,
    layers: Sequence[Any],
    queries: Sequence[torch.Tensor],
    kv_caches: Sequence[torch.Tensor],
) -> List[Any]:
    assert fb.forward_mode.is_decode_or_idle()
    md = _metadata(backend, fb)
    cp = _cp_kwargs()

    def launch(query, kv_cache, layer):
        return backend._run_decode_kernel(
            query.unsqueeze(1),
            kv_cache,
            md.block_kv_indices,
            md.seq_lens_k,
            md.max_seq_len_k,
            layer,
            causal_seqs=md.global_seq_lens_k,
            return_lse=True,
            **cp,
        )

    return [launch(q, kv, layer) for layer, q, kv in zip(layers, queries, kv_caches)]
