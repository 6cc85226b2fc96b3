"""Kernel-argument assembly for the MLA decode-family launches.

Arguments are built as dicts (``KernelArgPacker.pack``) and splatted into
``flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from sglang.srt.environ import envs
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg32.mla_dcp.builders import ForkDecodeMeta
from blindsg32.mla_dcp.dcp_math import DcpShard

if is_flashinfer_available():
    import flashinfer


@dataclass(frozen=True)
class MLAKernelDims:
    qk_nope_head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    workspace_buffer: torch.Tensor
    backend: str = "trtllm-gen"

    @classmethod
    def from_backend(cls, attn_backend: Any) -> "MLAKernelDims":
        return cls(
            qk_nope_head_dim=attn_backend.qk_nope_head_dim,
            kv_lora_rank=attn_backend.kv_lora_rank,
            qk_rope_head_dim=attn_backend.qk_rope_head_dim,
            workspace_buffer=attn_backend.workspace_buffer,
            backend=getattr(attn_backend, "backend", "trtllm-gen"),
        )


class KernelArgPacker:
    @staticmethod
    def pack(
        dims: MLAKernelDims,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        bmm1_scale: float,
        **extra: Any,
    ) -> Dict[str, Any]:
        kwargs: Dict[str, Any] = {
            "query": query,
            "kv_cache": kv_cache,
            "workspace_buffer": dims.workspace_buffer,
            "qk_nope_head_dim": dims.qk_nope_head_dim,
            "kv_lora_rank": dims.kv_lora_rank,
            "qk_rope_head_dim": dims.qk_rope_head_dim,
            "block_tables": block_tables,
            "seq_lens": seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
            "max_seq_len": max_seq_len,
            "bmm1_scale": bmm1_scale,
            "skip_softmax_threshold_scale_factor": envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        }
        if dims.backend != "trtllm-gen":
            kwargs["backend"] = dims.backend
        kwargs.update(extra)
        return kwargs

    @staticmethod
    def dcp_extra(shard: DcpShard, causal: torch.Tensor) -> Dict[str, Any]:
        if not shard.enabled:
            return {}
        return {
            "backend": "cute-dsl",
            "enable_dcp": True,
            "cp_world": shard.size,
            "cp_rank": shard.rank,
            "causal_seqlens_kv_global": causal.to(torch.int32),
            "return_lse": True,
        }


def _launch(kwargs: Dict[str, Any]):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**kwargs)


# idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp; kernel kwargs packed by the KernelArgPacker staticmethod from meta.global_seq_lens_k
# expect: SG203
def launch_decode_packed(
    dims: MLAKernelDims,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: ForkDecodeMeta,
    bmm1_scale: float,
):
    shard = DcpShard.current()
    bs = meta.batch_size
    kwargs = KernelArgPacker.pack(
        dims,
        query,
        kv_cache,
        meta.block_kv_indices,
        meta.global_seq_lens_k[:bs],
        meta.max_seq_len_k,
        bmm1_scale,
        return_lse=shard.enabled,
    )
    return _launch(kwargs)


# idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel; packed kwargs take meta.seq_lens_k (rank-local) plus the DCP extras with the global causal bound
# expect: clean
def launch_decode_packed_local(
    dims: MLAKernelDims,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: ForkDecodeMeta,
    bmm1_scale: float,
):
    shard = DcpShard.current()
    bs = meta.batch_size
    kwargs = KernelArgPacker.pack(
        dims,
        query,
        kv_cache,
        meta.block_kv_indices,
        meta.seq_lens_k[:bs],
        meta.max_seq_len_k,
        bmm1_scale,
        **KernelArgPacker.dcp_extra(shard, meta.global_seq_lens_k[:bs]),
    )
    return _launch(kwargs)


# idiom: layers/attention/trtllm_mla_backend.py forward_decode / forward_extend dispatch; per-mode KV lengths kept in a dict, the verify entry is seq_lens + draft tokens (whole) with a multi-token query
# expect: SG203
def launch_by_mode(
    dims: MLAKernelDims,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: ForkDecodeMeta,
    forward_batch: ForwardBatch,
    bmm1_scale: float,
    num_draft_tokens: int,
):
    bs = forward_batch.batch_size
    mode = forward_batch.forward_mode
    lens_by_mode = {
        "decode": meta.seq_lens_k[:bs],
        "verify": forward_batch.seq_lens[:bs] + num_draft_tokens,
    }
    key = "verify" if mode.is_target_verify() else "decode"
    q = query.view(bs, -1, query.shape[-2], query.shape[-1])
    kwargs = KernelArgPacker.pack(
        dims,
        q,
        kv_cache,
        meta.block_kv_indices,
        lens_by_mode[key],
        meta.max_seq_len_k + (num_draft_tokens if key == "verify" else 0),
        bmm1_scale,
        return_lse=get_parallel().dcp_enabled,
    )
    return _launch(kwargs)


# idiom: layers/attention/trtllm_mla_backend.py forward_extend target-verify DCP branch; per-mode (local, causal) pairs in a dict, verify passes the global bound through the cute-dsl DCP extras
# expect: clean
def launch_by_mode_local(
    dims: MLAKernelDims,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: ForkDecodeMeta,
    forward_batch: ForwardBatch,
    bmm1_scale: float,
    num_draft_tokens: int,
):
    shard = DcpShard.current()
    bs = forward_batch.batch_size
    verify_global = (forward_batch.seq_lens[:bs] + num_draft_tokens).to(torch.int32)
    lens_by_mode: Dict[str, Tuple[torch.Tensor, torch.Tensor]] = {
        "decode": (meta.seq_lens_k[:bs], meta.global_seq_lens_k[:bs]),
        "verify": (shard.localize(verify_global), verify_global),
    }
    key = "verify" if forward_batch.forward_mode.is_target_verify() else "decode"
    local, causal = lens_by_mode[key]
    q = query.view(bs, -1, query.shape[-2], query.shape[-1])
    kwargs = KernelArgPacker.pack(
        dims,
        q,
        kv_cache,
        meta.block_kv_indices,
        local,
        shard.local_max(int(meta.max_seq_len_k) + num_draft_tokens),
        bmm1_scale,
        **KernelArgPacker.dcp_extra(shard, causal),
    )
    return _launch(kwargs)


# idiom: layers/attention/trtllm_mla_backend.py _get_dcp_local_seq_lens guard; localizes only when attn_dp_enabled (wrong switch), so a DCP run without DP attention gets the whole lengths
# expect: SG203
def launch_decode_dp_flag(
    dims: MLAKernelDims,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    max_seq_len: int,
    bmm1_scale: float,
):
    shard = DcpShard.current()
    lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
    if get_parallel().attn_dp_enabled:
        lens = shard.localize(lens)
    kwargs = KernelArgPacker.pack(
        dims,
        query,
        kv_cache,
        block_tables,
        lens,
        shard.local_max(max_seq_len),
        bmm1_scale,
        return_lse=shard.enabled,
    )
    return _launch(kwargs)


# idiom: layers/attention/trtllm_mla_backend.py _get_dcp_local_seq_lens guard; localizes under get_parallel().dcp_enabled before packing the decode launch (q_len == 1)
# expect: clean
def launch_decode_dcp_flag(
    dims: MLAKernelDims,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    forward_batch: ForwardBatch,
    max_seq_len: int,
    bmm1_scale: float,
):
    shard = DcpShard.current()
    lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
    if get_parallel().dcp_enabled:
        lens = shard.localize(lens)
    kwargs = KernelArgPacker.pack(
        dims,
        query,
        kv_cache,
        block_tables,
        lens,
        shard.local_max(max_seq_len),
        bmm1_scale,
        return_lse=shard.enabled,
    )
    return _launch(kwargs)


class BudgetDraftExtendLauncher:
    """Draft-extend launch for per-request draft budgets: the query is padded
    to ``(bs, max_budget + 1, heads, dim)``."""

    def __init__(self, dims: MLAKernelDims):
        self.dims = dims
        self.shard = DcpShard.current()

    @classmethod
    def for_backend(cls, attn_backend: Any) -> "BudgetDraftExtendLauncher":
        return cls(MLAKernelDims.from_backend(attn_backend))

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend draft_extend branch (padded q); multi-token query under DCP gets rank-local lengths but no global causal bound and no refusal
    # expect: SG203
    def launch(
        self,
        padded_q: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        bmm1_scale: float,
    ):
        q_len = padded_q.shape[1]
        local = self.shard.localize(seq_lens)
        kwargs = KernelArgPacker.pack(
            self.dims,
            padded_q,
            kv_cache,
            block_tables,
            local,
            self.shard.local_max(max_seq_len + q_len),
            bmm1_scale,
            return_lse=self.shard.enabled,
        )
        return _launch(kwargs)


class StrictBudgetDraftExtendLauncher(BudgetDraftExtendLauncher):
    """Same launch, for deployments that never run DCP."""

    def __init__(self, dims: MLAKernelDims):
        super().__init__(dims)
        if self.shard.enabled:
            raise NotImplementedError(
                "budgeted draft extend cannot pass a global causal bound to "
                "trtllm-gen; DCP requires the cute-dsl launcher"
            )

    # idiom: layers/attention/trtllm_mla_backend.py forward_extend draft_extend branch; the launcher class refuses DCP in its constructor, so whole lengths are this rank's
    # expect: clean
    def launch(
        self,
        padded_q: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        bmm1_scale: float,
    ):
        q_len = padded_q.shape[1]
        kwargs = KernelArgPacker.pack(
            self.dims,
            padded_q,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len + q_len,
            bmm1_scale,
        )
        return _launch(kwargs)
