"""Standalone MLA decode / verify launchers used by the fork's model-side
fast paths (DeepSeek MLA absorbed decode), with decode context parallel.

Each DCP rank holds the interleaved slice ``pos % dcp_size == dcp_rank`` of
every request's KV; the page table passed in ``block_tables`` is already this
rank's (``create_mla_kv_page_table_for_dcp``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Optional, Tuple

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.dcp import filter_dcp_local_kv_indices
from sglang.srt.layers.dcp.layout import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.layers.dcp.planner import plan_dcp_decode_metadata
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer
    from flashinfer import BatchMLAPagedAttentionWrapper
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator

logger = logging.getLogger(__name__)


@dataclass
class MLAKernelDims:
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int


@dataclass
class DcpDecodeLens:
    local_kv_lens: torch.Tensor
    global_kv_lens: torch.Tensor
    max_local_len: int

    @classmethod
    def from_seq_lens(
        cls, seq_lens: torch.Tensor, max_seq_len: int, extra: int = 0
    ) -> "DcpDecodeLens":
        parallel = get_parallel()
        global_kv_lens = (seq_lens + extra).to(torch.int32)
        if not parallel.dcp_enabled:
            return cls(global_kv_lens, global_kv_lens, max_seq_len + extra)
        local = get_dcp_lens(global_kv_lens, parallel.dcp_size, parallel.dcp_rank)
        max_local = (max_seq_len + extra) // parallel.dcp_size + 1
        return cls(local.to(torch.int32), global_kv_lens, max(max_local, 1))


def split_dcp_lens(seq_lens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return ``(global_lens, rank_local_lens)`` as int32."""
    parallel = get_parallel()
    global_lens = seq_lens.to(torch.int32)
    if not parallel.dcp_enabled:
        return global_lens, global_lens
    return global_lens, get_dcp_lens(
        global_lens, parallel.dcp_size, parallel.dcp_rank
    ).to(torch.int32)


def _bmm1_scale(layer: "RadixAttention") -> float:
    k_scale = getattr(layer, "k_scale_float", None) or 1.0
    return k_scale * layer.scaling


# expect: SG203
def run_mla_decode_dcp_v2(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    seq_lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
    dcp_kwargs = {}
    if parallel.dcp_enabled:
        dcp_kwargs = dict(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=_bmm1_scale(layer),
        backend="cute-dsl",
        **dcp_kwargs,
    )


# expect: clean
def run_mla_decode_dcp(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    seq_lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
    kernel_lens = seq_lens
    dcp_kwargs = {}
    if parallel.dcp_enabled:
        kernel_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        max_seq_len = max(max_seq_len // parallel.dcp_size + 1, 1)
        dcp_kwargs = dict(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=kernel_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=_bmm1_scale(layer),
        backend="cute-dsl",
        **dcp_kwargs,
    )


# expect: SG203
def run_mla_verify(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
    draft_token_num: int,
):
    bs = forward_batch.batch_size
    parallel = get_parallel()
    kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
    if parallel.dcp_enabled:
        kv_lens = get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank).to(
            torch.int32
        )
        max_seq_len = max_seq_len // parallel.dcp_size + 1
    q = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=kv_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=_bmm1_scale(layer),
        return_lse=parallel.dcp_enabled,
    )


# expect: clean
def run_mla_verify_trtllm_gen(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
    draft_token_num: int,
):
    bs = forward_batch.batch_size
    if get_parallel().dcp_enabled:
        raise NotImplementedError(
            "trtllm-gen MLA verify has no per-query causal bound under DCP; "
            "use run_mla_verify_cute_dsl"
        )
    kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
    q = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    return trtllm_batch_decode_with_kv_cache_mla(
        query=q,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=kv_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=_bmm1_scale(layer),
    )


# expect: clean
def run_mla_verify_cute_dsl(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
    draft_token_num: int,
):
    bs = forward_batch.batch_size
    lens = DcpDecodeLens.from_seq_lens(
        forward_batch.seq_lens[:bs], max_seq_len, extra=draft_token_num
    )
    parallel = get_parallel()
    q = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
    launch_kwargs = dict(
        query=q,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=lens.local_kv_lens,
        max_seq_len=lens.max_local_len,
        bmm1_scale=_bmm1_scale(layer),
        backend="cute-dsl",
    )
    if parallel.dcp_enabled:
        launch_kwargs.update(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=lens.global_kv_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)


# expect: SG203
def run_mla_decode_from_lens(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    bs = forward_batch.batch_size
    lens = DcpDecodeLens.from_seq_lens(forward_batch.seq_lens[:bs], max_seq_len)
    parallel = get_parallel()
    launch_kwargs = {
        "query": query,
        "kv_cache": kv_cache,
        "workspace_buffer": workspace_buffer,
        "qk_nope_head_dim": dims.qk_nope_head_dim,
        "kv_lora_rank": dims.kv_lora_rank,
        "qk_rope_head_dim": dims.qk_rope_head_dim,
        "block_tables": block_tables,
        "max_seq_len": lens.max_local_len,
        "bmm1_scale": _bmm1_scale(layer),
        "backend": "cute-dsl",
    }
    if parallel.dcp_enabled:
        launch_kwargs["enable_dcp"] = True
        launch_kwargs["cp_world"] = parallel.dcp_size
        launch_kwargs["cp_rank"] = parallel.dcp_rank
        launch_kwargs["causal_seqlens_kv_global"] = lens.global_kv_lens
        launch_kwargs["return_lse"] = True
    launch_kwargs["seq_lens"] = lens.global_kv_lens
    return trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)


# expect: SG203
def run_mla_decode_partial(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    kv_lens_i32 = forward_batch.seq_lens.to(torch.int32)
    decode = functools.partial(
        flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        seq_lens=kv_lens_i32,
        bmm1_scale=_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )
    if not parallel.dcp_enabled:
        return decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            max_seq_len=max_seq_len,
        )
    return decode(
        query=query,
        kv_cache=kv_cache,
        block_tables=block_tables,
        max_seq_len=max(max_seq_len // parallel.dcp_size + 1, 1),
        return_lse=True,
    )


# expect: SG203
def run_mla_decode_split(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    local_lens, whole_lens = split_dcp_lens(forward_batch.seq_lens)
    extra = {}
    if parallel.dcp_enabled:
        extra = dict(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=whole_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=local_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=_bmm1_scale(layer),
        backend="cute-dsl",
        **extra,
    )


# expect: clean
def run_mla_decode_split_v2(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    whole_lens, local_lens = split_dcp_lens(forward_batch.seq_lens)
    extra = {}
    if parallel.dcp_enabled:
        extra = dict(
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=whole_lens,
            return_lse=True,
        )
    return trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace_buffer,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=local_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=_bmm1_scale(layer),
        backend="cute-dsl",
        **extra,
    )


def _decode_kv_indices(
    translator: "KVIndexTranslator",
    forward_batch: ForwardBatch,
    kv_indptr: torch.Tensor,
) -> torch.Tensor:
    bs = forward_batch.batch_size
    kv_indptr[1 : bs + 1] = torch.cumsum(forward_batch.seq_lens[:bs], dim=0)
    kv_indices = torch.empty(
        forward_batch.seq_lens_sum, dtype=torch.int32, device=kv_indptr.device
    )
    translator.pack_read_stream(
        forward_batch.kv_loc_plan,
        req_pool_indices=forward_batch.req_pool_indices,
        seq_lens=forward_batch.seq_lens[:bs],
        indptr=kv_indptr[: bs + 1],
        out=kv_indices,
    )
    return kv_indices


# expect: SG203
def plan_mla_decode_wrapper(
    wrapper: "BatchMLAPagedAttentionWrapper",
    translator: "KVIndexTranslator",
    forward_batch: ForwardBatch,
    q_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    num_heads: int,
    dims: MLAKernelDims,
    sm_scale: float,
    data_type: torch.dtype,
):
    bs = forward_batch.batch_size
    kv_indices = _decode_kv_indices(translator, forward_batch, kv_indptr)
    kv_len_arr = forward_batch.seq_lens[:bs].to(torch.int32)
    if get_parallel().dcp_enabled:
        kv_indices = filter_dcp_local_kv_indices(kv_indices)
        kv_indices = translator.translate_dcp_read_ids(kv_indices)
    wrapper.plan(
        q_indptr[: bs + 1],
        kv_indptr[: bs + 1],
        kv_indices,
        kv_len_arr,
        num_heads,
        dims.kv_lora_rank,
        dims.qk_rope_head_dim,
        1,
        False,
        sm_scale,
        data_type,
        data_type,
    )


# expect: clean
def plan_mla_decode_wrapper_v2(
    wrapper: "BatchMLAPagedAttentionWrapper",
    translator: "KVIndexTranslator",
    forward_batch: ForwardBatch,
    q_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    num_heads: int,
    dims: MLAKernelDims,
    sm_scale: float,
    data_type: torch.dtype,
):
    bs = forward_batch.batch_size
    kv_indices = _decode_kv_indices(translator, forward_batch, kv_indptr)
    kv_len_arr = forward_batch.seq_lens[:bs].to(torch.int32)
    if get_parallel().dcp_enabled:
        n_local = plan_dcp_decode_metadata(
            kv_len_arr, kv_indptr, kv_indices, False, {}, bs
        )
        kv_indices = translator.translate_dcp_read_ids(kv_indices[:n_local])
    wrapper.plan(
        q_indptr[: bs + 1],
        kv_indptr[: bs + 1],
        kv_indices,
        kv_len_arr,
        num_heads,
        dims.kv_lora_rank,
        dims.qk_rope_head_dim,
        1,
        False,
        sm_scale,
        data_type,
        data_type,
    )


# expect: clean
def plan_mla_decode_wrapper_host(
    wrapper: "BatchMLAPagedAttentionWrapper",
    kv_indices: torch.Tensor,
    seq_lens_cpu: torch.Tensor,
    bs: int,
    num_heads: int,
    dims: MLAKernelDims,
    sm_scale: float,
    data_type: torch.dtype,
):
    kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
    update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
    torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
    qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
    wrapper.plan(
        qo_indptr_cpu,
        kv_indptr_cpu,
        kv_indices,
        kv_len_arr_cpu,
        num_heads,
        dims.kv_lora_rank,
        dims.qk_rope_head_dim,
        1,
        False,
        sm_scale,
        data_type,
        data_type,
    )


# expect: SG203
def plan_mla_decode_wrapper_host_cached(
    wrapper: "BatchMLAPagedAttentionWrapper",
    kv_indices: torch.Tensor,
    seq_lens_cpu: torch.Tensor,
    bs: int,
    num_heads: int,
    dims: MLAKernelDims,
    sm_scale: float,
    data_type: torch.dtype,
    kv_len_cache: Optional[torch.Tensor] = None,
):
    if kv_len_cache is not None and kv_len_cache.shape[0] >= bs:
        kv_len_arr_cpu = kv_len_cache[:bs]
        kv_len_arr_cpu.copy_(seq_lens_cpu[:bs])
    else:
        kv_len_arr_cpu = seq_lens_cpu[:bs].to(torch.int32)
        update_local_kv_lens_for_dcp(kv_len_arr_cpu)
    kv_indptr_cpu = torch.zeros(bs + 1, dtype=torch.int32)
    torch.cumsum(kv_len_arr_cpu, dim=0, out=kv_indptr_cpu[1:])
    qo_indptr_cpu = torch.arange(0, bs + 1, dtype=torch.int32)
    wrapper.plan(
        qo_indptr_cpu,
        kv_indptr_cpu,
        kv_indices,
        kv_len_arr_cpu,
        num_heads,
        dims.kv_lora_rank,
        dims.qk_rope_head_dim,
        1,
        False,
        sm_scale,
        data_type,
        data_type,
    )


@contextlib.contextmanager
def dcp_decode_lens(
    forward_batch: ForwardBatch, max_seq_len: int
) -> Iterator[DcpDecodeLens]:
    """Per-step DCP lengths; restores ``seq_lens_sum`` that some callers patch
    to the rank-local total while the launch is in flight."""
    bs = forward_batch.batch_size
    lens = DcpDecodeLens.from_seq_lens(forward_batch.seq_lens[:bs], max_seq_len)
    saved_sum = forward_batch.seq_lens_sum
    try:
        yield lens
    finally:
        forward_batch.seq_lens_sum = saved_sum


# expect: SG203
def run_mla_decode_scoped(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    with dcp_decode_lens(forward_batch, max_seq_len) as lens:
        if parallel.dcp_enabled:
            forward_batch.seq_lens_sum = int(lens.local_kv_lens.sum().item())
        kernel_lens = lens.global_kv_lens
        return trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=workspace_buffer,
            qk_nope_head_dim=dims.qk_nope_head_dim,
            kv_lora_rank=dims.kv_lora_rank,
            qk_rope_head_dim=dims.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=kernel_lens,
            max_seq_len=lens.max_local_len,
            bmm1_scale=_bmm1_scale(layer),
            return_lse=parallel.dcp_enabled,
        )


# expect: clean
def run_mla_decode_in_scope(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace_buffer: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: "RadixAttention",
    dims: MLAKernelDims,
    max_seq_len: int,
):
    parallel = get_parallel()
    with dcp_decode_lens(forward_batch, max_seq_len) as lens:
        if parallel.dcp_enabled:
            forward_batch.seq_lens_sum = int(lens.local_kv_lens.sum().item())
        kernel_lens = lens.local_kv_lens
        return trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=workspace_buffer,
            qk_nope_head_dim=dims.qk_nope_head_dim,
            kv_lora_rank=dims.kv_lora_rank,
            qk_rope_head_dim=dims.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=kernel_lens,
            max_seq_len=lens.max_local_len,
            bmm1_scale=_bmm1_scale(layer),
            return_lse=parallel.dcp_enabled,
        )
