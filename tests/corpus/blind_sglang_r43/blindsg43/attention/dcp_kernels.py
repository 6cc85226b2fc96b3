"""Direct MLA decode / verify kernel launches for decode context parallelism.

These launch ``flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla``
themselves (cute-dsl for the DCP-aware kernel) using a ``TRTLLMMLABackend``
only for its workspace, model dims and page-table builder.  Under DCP the
page table from ``TRTLLMMLABackend._create_block_kv_indices`` is this rank's
cyclic slice.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, List, Optional, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp import update_local_kv_lens_for_dcp
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg43.common.dcp_lens import (
    DcpLens,
    split_global_local,
    to_local,
    verify_global_lens,
)

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


def _mla_kernel(**kwargs):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


def _kv_cache(backend: TRTLLMMLABackend, layer: "RadixAttention") -> torch.Tensor:
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    return paged_row_view(k_cache, backend.page_size).unsqueeze(1)


def _base_kwargs(
    backend: TRTLLMMLABackend, layer: "RadixAttention", max_seq_len: int
) -> dict:
    return dict(
        kv_cache=_kv_cache(backend, layer),
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
    )


def _dcp_kwargs() -> dict:
    parallel = get_parallel()
    return dict(
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )


def _rank_table(
    backend: TRTLLMMLABackend, forward_batch: ForwardBatch, global_lens: torch.Tensor
) -> torch.Tensor:
    bs = global_lens.shape[0]
    return backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(backend.max_context_len),
        forward_batch.req_pool_indices[:bs],
        global_lens,
        global_lens.device,
    )


def _local_max(backend: TRTLLMMLABackend, extra: int = 0) -> int:
    return backend._get_dcp_local_max_seq_len(backend.max_context_len + extra)


def _verify_query(q: torch.Tensor, layer: "RadixAttention", bs: int, ndt: int):
    return q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)


# ----------------------------------------------------------------------
# target verify (q_len = draft_token_num)
# ----------------------------------------------------------------------
# expect: SG203
def launch_verify_kwargs(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    local_lens = to_local(global_lens)
    kw = _base_kwargs(backend, layer, _local_max(backend, ndt))
    kw.update(_dcp_kwargs())
    kw.update(
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=global_lens,
        causal_seqlens_kv_global=local_lens,
    )
    return _mla_kernel(query=_verify_query(q, layer, bs, ndt), **kw)


# expect: clean
def launch_tree_verify_kwargs(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    kw = _base_kwargs(backend, layer, _local_max(backend, ndt))
    kw.update(_dcp_kwargs())
    kw.update(
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=to_local(global_lens),
        causal_seqlens_kv_global=global_lens,
    )
    return _mla_kernel(query=_verify_query(q, layer, bs, ndt), **kw)


# expect: SG203
def launch_verify_partial(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    launch = partial(
        _mla_kernel,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
        causal_seqlens_kv_global=global_lens,
    )
    return launch(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=global_lens,
    )


# expect: clean
def launch_chain_verify_partial(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    launch = partial(
        _mla_kernel,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
        causal_seqlens_kv_global=global_lens,
    )
    return launch(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=to_local(global_lens),
    )


# expect: SG203
def launch_verify_by_kernel_kind(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    local_lens = to_local(global_lens)
    table = _rank_table(backend, forward_batch, global_lens)
    query = _verify_query(q, layer, bs, ndt)
    if backend.backend != "cute-dsl":
        return _mla_kernel(
            query=query,
            block_tables=table,
            seq_lens=local_lens,
            backend=backend.backend,
            return_lse=True,
            **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        )
    return _mla_kernel(
        query=query,
        block_tables=table,
        seq_lens=local_lens,
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
    )


# expect: clean
def launch_verify_selected_kernel(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    if backend.backend != "cute-dsl" and ndt > 1:
        raise NotImplementedError(
            f"{backend.backend} has no global causal bound for a DCP verify "
            f"of {ndt} tokens; use cutedsl_mla"
        )
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    return _mla_kernel(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=to_local(global_lens),
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
    )


# expect: SG203
def launch_verify_from_pair(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    local_lens, global_lens = split_global_local(
        verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    )
    return _mla_kernel(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=local_lens,
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
    )


# expect: clean
def launch_verify_split_lens(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens, local_lens = split_global_local(
        verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    )
    return _mla_kernel(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=local_lens,
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
    )


# expect: SG203
def launch_verify_from_record(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    lens = DcpLens(global_lens, to_local(global_lens))
    return _mla_kernel(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=lens.local,
        causal_seqlens_kv_global=lens.global_,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
    )


# expect: clean
def launch_verify_lens_record(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    ndt = forward_batch.spec_info.draft_token_num
    global_lens = verify_global_lens(forward_batch.seq_lens[:bs], ndt)
    lens = DcpLens(local=to_local(global_lens), global_=global_lens)
    return _mla_kernel(
        query=_verify_query(q, layer, bs, ndt),
        block_tables=_rank_table(backend, forward_batch, global_lens),
        seq_lens=lens.local,
        causal_seqlens_kv_global=lens.global_,
        **_base_kwargs(backend, layer, _local_max(backend, ndt)),
        **_dcp_kwargs(),
    )


# ----------------------------------------------------------------------
# decode (q_len = 1)
# ----------------------------------------------------------------------
def _decode_query(q: torch.Tensor, layer: "RadixAttention", bs: int):
    return q.view(bs, 1, layer.tp_q_head_num, layer.head_dim)


# expect: SG203
def launch_decode_closure(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    table = _rank_table(backend, forward_batch, global_lens)
    lens = to_local(global_lens)

    def _run(query: torch.Tensor):
        return _mla_kernel(
            query=query,
            block_tables=table,
            seq_lens=lens,
            causal_seqlens_kv_global=global_lens,
            **_base_kwargs(backend, layer, _local_max(backend)),
            **_dcp_kwargs(),
        )

    lens = global_lens
    if forward_batch.seq_lens_cpu is not None:
        lens_max = int(forward_batch.seq_lens_cpu[:bs].max())
        assert lens_max <= backend.max_context_len, lens_max
    raw_out, lse = _run(_decode_query(q, layer, bs))
    return raw_out, lse


# expect: clean
def launch_decode_deferred(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    table = _rank_table(backend, forward_batch, global_lens)
    lens = to_local(global_lens)

    def _run(query: torch.Tensor, seq_lens: torch.Tensor = lens):
        return _mla_kernel(
            query=query,
            block_tables=table,
            seq_lens=seq_lens,
            causal_seqlens_kv_global=global_lens,
            **_base_kwargs(backend, layer, _local_max(backend)),
            **_dcp_kwargs(),
        )

    lens = global_lens
    if forward_batch.seq_lens_cpu is not None:
        lens_max = int(forward_batch.seq_lens_cpu[:bs].max())
        assert lens_max <= backend.max_context_len, lens_max
    raw_out, lse = _run(_decode_query(q, layer, bs))
    return raw_out, lse


# expect: SG203
def launch_draft_steps(
    backend: TRTLLMMLABackend,
    step_queries: List[torch.Tensor],
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    """One single-token decode per draft step, the prefix growing by one."""
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    base = forward_batch.seq_lens[:bs].to(torch.int32)
    step_lens: List[Tuple[torch.Tensor, torch.Tensor]] = []
    for step in range(len(step_queries)):
        global_step = base + step
        step_lens.append((global_step, to_local(global_step)))
    outs = []
    for query, (local_lens, global_lens) in zip(step_queries, step_lens):
        outs.append(
            _mla_kernel(
                query=_decode_query(query, layer, bs),
                block_tables=_rank_table(backend, forward_batch, global_lens),
                seq_lens=local_lens,
                causal_seqlens_kv_global=global_lens,
                **_base_kwargs(backend, layer, _local_max(backend, len(step_queries))),
                **_dcp_kwargs(),
            )
        )
    return outs


# expect: clean
def launch_draft_chain_steps(
    backend: TRTLLMMLABackend,
    step_queries: List[torch.Tensor],
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    base = forward_batch.seq_lens[:bs].to(torch.int32)
    step_lens: List[Tuple[torch.Tensor, torch.Tensor]] = []
    for step in range(len(step_queries)):
        global_step = base + step
        step_lens.append((global_step, to_local(global_step)))
    outs = []
    for query, (global_lens, local_lens) in zip(step_queries, step_lens):
        outs.append(
            _mla_kernel(
                query=_decode_query(query, layer, bs),
                block_tables=_rank_table(backend, forward_batch, global_lens),
                seq_lens=local_lens,
                causal_seqlens_kv_global=global_lens,
                **_base_kwargs(backend, layer, _local_max(backend, len(step_queries))),
                **_dcp_kwargs(),
            )
        )
    return outs


# expect: SG203
def launch_decode_from_metadata(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    metadata: TRTLLMMLADecodeMetadata = forward_batch.decode_trtllm_mla_metadata
    local_lens = to_local(metadata.seq_lens_k[:bs])
    return _mla_kernel(
        query=_decode_query(q, layer, bs),
        block_tables=metadata.block_kv_indices,
        seq_lens=local_lens,
        causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
        **_base_kwargs(backend, layer, metadata.max_seq_len_k),
        **_dcp_kwargs(),
    )


# expect: SG203
def launch_decode_inplace_lens(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    lens = forward_batch.seq_lens[:bs].to(torch.int32)
    table = _rank_table(backend, forward_batch, lens)
    global_lens = lens
    update_local_kv_lens_for_dcp(lens)
    raw_out, lse = _mla_kernel(
        query=_decode_query(q, layer, bs),
        block_tables=table,
        seq_lens=lens,
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend)),
        **_dcp_kwargs(),
    )
    fixup_zero_kv_rows(
        raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim),
        lse.view(-1, layer.tp_q_head_num),
        lens,
        backend.q_indptr_decode[: bs + 1],
        1,
    )
    return raw_out, lse


# expect: clean
def launch_decode_rank_lens(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    assert get_parallel().dcp_enabled
    bs = forward_batch.batch_size
    lens = forward_batch.seq_lens[:bs].to(torch.int32)
    table = _rank_table(backend, forward_batch, lens)
    global_lens = lens.clone()
    update_local_kv_lens_for_dcp(lens)
    raw_out, lse = _mla_kernel(
        query=_decode_query(q, layer, bs),
        block_tables=table,
        seq_lens=lens,
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend)),
        **_dcp_kwargs(),
    )
    fixup_zero_kv_rows(
        raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim),
        lse.view(-1, layer.tp_q_head_num),
        lens,
        backend.q_indptr_decode[: bs + 1],
        1,
    )
    return raw_out, lse


# expect: clean
def launch_decode_any(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: ForwardBatch,
):
    bs = forward_batch.batch_size
    global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
    table = _rank_table(backend, forward_batch, global_lens)
    if not get_parallel().dcp_enabled:
        return _mla_kernel(
            query=_decode_query(q, layer, bs),
            block_tables=table,
            seq_lens=global_lens,
            backend="trtllm-gen",
            **_base_kwargs(backend, layer, backend.max_context_len),
        )
    return _mla_kernel(
        query=_decode_query(q, layer, bs),
        block_tables=table,
        seq_lens=to_local(global_lens),
        causal_seqlens_kv_global=global_lens,
        **_base_kwargs(backend, layer, _local_max(backend)),
        **_dcp_kwargs(),
    )


class MetadataDecodeLaunch:
    """Decode launch over the per-step metadata a trtllm_mla backend planned."""

    def __init__(self, backend: TRTLLMMLABackend, metadata: TRTLLMMLADecodeMetadata):
        self.backend = backend
        self.metadata = metadata

    @property
    def kernel_seq_lens(self) -> torch.Tensor:
        return self.metadata.global_seq_lens_k

    # expect: SG203
    def launch(self, q: torch.Tensor, layer: "RadixAttention", bs: int):
        assert get_parallel().dcp_enabled
        metadata = self.metadata
        return _mla_kernel(
            query=_decode_query(q, layer, bs),
            block_tables=metadata.block_kv_indices,
            seq_lens=self.kernel_seq_lens[:bs],
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
            **_base_kwargs(self.backend, layer, metadata.max_seq_len_k),
            **_dcp_kwargs(),
        )


class RankMetadataDecodeLaunch:
    """Decode launch over planned metadata, reading the rank view by name."""

    def __init__(self, backend: TRTLLMMLABackend, metadata: TRTLLMMLADecodeMetadata):
        self.backend = backend
        self.metadata = metadata

    @property
    def rank_seq_lens(self) -> torch.Tensor:
        return self.metadata.seq_lens_k

    @property
    def causal_bound(self) -> Optional[torch.Tensor]:
        return self.metadata.global_seq_lens_k

    # expect: clean
    def launch(self, q: torch.Tensor, layer: "RadixAttention", bs: int):
        assert get_parallel().dcp_enabled
        metadata = self.metadata
        return _mla_kernel(
            query=_decode_query(q, layer, bs),
            block_tables=metadata.block_kv_indices,
            seq_lens=self.rank_seq_lens[:bs],
            causal_seqlens_kv_global=self.causal_bound[:bs],
            **_base_kwargs(self.backend, layer, metadata.max_seq_len_k),
            **_dcp_kwargs(),
        )
