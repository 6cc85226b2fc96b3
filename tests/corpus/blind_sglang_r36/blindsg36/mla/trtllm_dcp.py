"""DCP experiments on the TRTLLM MLA family (trtllm-gen and cute-dsl kernels).

Metadata objects (TRTLLMMLADecodeMetadata) are built in one place and
consumed by the backend's decode / verify launches.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import flashinfer
import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from .lens import MLA_CFG, dcp_world, local_lens_arith, maybe_local


def _finish_dcp(raw_out, lse, local_lens, q_indptr, layer: RadixAttention, q_per_req: int = 1):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_lens, q_indptr, q_per_req)
    return output.flatten(1), lse


class LabTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm-gen decode with the lab's metadata handling."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # The graph buffer's seq_lens_k carries a padded tail past bs; read
        # the live batch instead (already int32 after the decode update).
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer)


class LabTRTLLMMLABackendB(TRTLLMMLABackend):
    """Same, with the rank-local lengths spelled out."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        dcp_size, dcp_rank = dcp_world()
        seq_lens = forward_batch.seq_lens[:bs]
        local = local_lens_arith(seq_lens, dcp_size, dcp_rank).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(raw_out, lse, local, self.q_indptr_decode[: bs + 1], layer)


def decode_with_lab_metadata(backend: TRTLLMMLABackend, query, layer, forward_batch, meta):
    """Consumer: the rank-local decode launch reads meta.seq_lens_k."""
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    from sglang.srt.mem_cache.layout.paged_view import paged_row_view

    kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
    return backend._forward_decode_dcp(query, kv_cache, meta, layer, forward_batch)


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode branch)
# expect: SG203
def build_trtllm_decode_metadata_v2(
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
    *,
    num_draft_tokens: int = 0,
    max_seq_hint: Optional[int] = None,
    with_global: bool = True,
    publish: bool = True,
):
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens
    if forward_batch.forward_mode.is_target_verify():
        seq_lens = seq_lens + num_draft_tokens
    if max_seq_hint is not None:
        max_seq = max_seq_hint
    elif forward_batch.seq_lens_cpu is not None:
        max_seq = int(forward_batch.seq_lens_cpu.max().item()) + num_draft_tokens
    else:
        max_seq = backend.max_context_len
    meta = TRTLLMMLADecodeMetadata()
    meta.seq_lens_k = seq_lens.to(torch.int32)
    if get_parallel().dcp_enabled and with_global:
        meta.global_seq_lens_k = meta.seq_lens_k
    # _create_block_kv_indices builds the rank-local page table under DCP.
    meta.block_kv_indices = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_seq),
        forward_batch.req_pool_indices,
        seq_lens,
        seq_lens.device,
    )
    meta.max_seq_len_k = backend._get_dcp_local_max_seq_len(int(max_seq))
    meta.batch_size = bs
    if publish:
        forward_batch.decode_trtllm_mla_metadata = meta
    return meta


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode branch)
# expect: clean
def build_trtllm_decode_metadata(
    backend: TRTLLMMLABackend,
    forward_batch: ForwardBatch,
    *,
    num_draft_tokens: int = 0,
    max_seq_hint: Optional[int] = None,
    publish: bool = True,
):
    bs = forward_batch.batch_size
    seq_lens = forward_batch.seq_lens
    if forward_batch.forward_mode.is_target_verify():
        seq_lens = seq_lens + num_draft_tokens
    if max_seq_hint is not None:
        max_seq = max_seq_hint
    elif forward_batch.seq_lens_cpu is not None:
        max_seq = int(forward_batch.seq_lens_cpu.max().item()) + num_draft_tokens
    else:
        max_seq = backend.max_context_len
    meta = TRTLLMMLADecodeMetadata()
    meta.global_seq_lens_k = seq_lens.to(torch.int32)
    # Identity when DCP is off.
    meta.seq_lens_k = backend._get_dcp_local_seq_lens(meta.global_seq_lens_k)
    meta.block_kv_indices = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_seq),
        forward_batch.req_pool_indices,
        seq_lens,
        seq_lens.device,
    )
    meta.max_seq_len_k = backend._get_dcp_local_max_seq_len(int(max_seq))
    meta.batch_size = bs
    if publish:
        forward_batch.decode_trtllm_mla_metadata = meta
    return meta


def _lab_spec_metadata(backend, forward_batch: ForwardBatch):
    """Shared part of the lab's init: global K lengths per mode + block table."""
    bs = forward_batch.batch_size
    mode = forward_batch.forward_mode
    meta = TRTLLMMLADecodeMetadata()
    max_seq = (
        int(forward_batch.seq_lens_cpu.max().item())
        if forward_batch.seq_lens_cpu is not None
        else backend.max_context_len
    )
    seq_lens = forward_batch.seq_lens
    if mode.is_target_verify():
        max_seq += backend.num_draft_tokens
        seq_lens = seq_lens + backend.num_draft_tokens
    elif mode.is_draft_extend_v2():
        max_q = max(forward_batch.extend_seq_lens_cpu)
        seq_lens = seq_lens - forward_batch.extend_seq_lens + max_q
        meta.max_seq_len_q = max_q
        meta.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
        meta.cu_seqlens_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32), (1, 0)
        )
        meta.seq_lens_q = forward_batch.extend_seq_lens
    meta.seq_lens_k = seq_lens.to(torch.int32)
    meta.block_kv_indices = backend._create_block_kv_indices(
        forward_batch.kv_loc_plan,
        bs,
        backend._calc_padded_blocks(max_seq),
        forward_batch.req_pool_indices,
        seq_lens,
        seq_lens.device,
    )
    meta.max_seq_len_k = int(max_seq)
    meta.batch_size = bs
    return meta


class LabCuteDslMetadataBackendV2(CuteDslMLABackend):
    """cute-dsl backend with the lab's own decode-family metadata init."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if not (mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()):
            return super().init_forward_metadata(forward_batch)
        if mode.is_target_verify() or mode.is_draft_extend_v2():
            self.forward_prefill_metadata = None
        meta = _lab_spec_metadata(self, forward_batch)
        parallel = get_parallel()
        if parallel.dcp_enabled:
            meta.global_seq_lens_k = meta.seq_lens_k
            if mode.is_decode_or_idle():
                # verify / draft-extend read the global bound from
                # global_seq_lens_k; only plain decode needs the local view.
                meta.seq_lens_k = self._get_dcp_local_seq_lens(meta.global_seq_lens_k)
            meta.max_seq_len_k = self._get_dcp_local_max_seq_len(meta.max_seq_len_k)
        elif mode.is_target_verify():
            meta.global_seq_lens_k = meta.seq_lens_k
        self.forward_decode_metadata = meta
        forward_batch.decode_trtllm_mla_metadata = meta


class LabCuteDslMetadataBackend(CuteDslMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if not (mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()):
            return super().init_forward_metadata(forward_batch)
        if mode.is_target_verify() or mode.is_draft_extend_v2():
            self.forward_prefill_metadata = None
        meta = _lab_spec_metadata(self, forward_batch)
        parallel = get_parallel()
        if parallel.dcp_enabled:
            # Every decode-family mode: keep the global lengths as the causal
            # bound and hand the kernels this rank's share.
            meta.global_seq_lens_k = meta.seq_lens_k
            meta.seq_lens_k = self._get_dcp_local_seq_lens(meta.global_seq_lens_k)
            meta.max_seq_len_k = self._get_dcp_local_max_seq_len(meta.max_seq_len_k)
        elif mode.is_target_verify():
            meta.global_seq_lens_k = meta.seq_lens_k
        self.forward_decode_metadata = meta
        forward_batch.decode_trtllm_mla_metadata = meta


def _cute_dsl_call(backend, query, kv_cache, block_tables, seq_lens, causal, max_seq_len,
                   layer, dcp_size, dcp_rank):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=seq_lens.to(torch.int32),
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        backend="cute-dsl",
        enable_dcp=True,
        cp_world=dcp_size,
        cp_rank=dcp_rank,
        causal_seqlens_kv_global=causal.to(torch.int32),
        return_lse=True,
    )


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
# expect: SG203
def trtllm_dcp_decode_direct(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: RadixAttention,
    *,
    block_tables: Optional[torch.Tensor] = None,
    max_seq_len: Optional[int] = None,
    skip_fixup: bool = False,
):
    parallel = get_parallel()
    assert parallel.dcp_enabled, "DCP-only launch"
    bs = forward_batch.batch_size
    meta = forward_batch.decode_trtllm_mla_metadata
    glob = forward_batch.seq_lens[:bs]
    local = maybe_local(glob)
    block_tables = block_tables if block_tables is not None else meta.block_kv_indices
    max_seq_len = max_seq_len or meta.max_seq_len_k
    raw_out, lse = _cute_dsl_call(
        backend, query, kv_cache, block_tables, local, glob, max_seq_len, layer,
        parallel.dcp_size, parallel.dcp_rank,
    )
    if skip_fixup:
        return raw_out, lse
    return _finish_dcp(raw_out, lse, local, backend.q_indptr_decode[: bs + 1], layer)


# idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
# expect: clean
def trtllm_dcp_decode_direct_v2(
    backend: CuteDslMLABackend,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    forward_batch: ForwardBatch,
    layer: RadixAttention,
    *,
    block_tables: Optional[torch.Tensor] = None,
    max_seq_len: Optional[int] = None,
    skip_fixup: bool = False,
):
    parallel = get_parallel()
    assert parallel.dcp_enabled, "DCP-only launch"
    bs = forward_batch.batch_size
    meta = forward_batch.decode_trtllm_mla_metadata
    glob = forward_batch.seq_lens[:bs]
    local = maybe_local(glob, parallel.dcp_size, parallel.dcp_rank)
    block_tables = block_tables if block_tables is not None else meta.block_kv_indices
    max_seq_len = max_seq_len or meta.max_seq_len_k
    raw_out, lse = _cute_dsl_call(
        backend, query, kv_cache, block_tables, local, glob, max_seq_len, layer,
        parallel.dcp_size, parallel.dcp_rank,
    )
    if skip_fixup:
        return raw_out, lse
    return _finish_dcp(raw_out, lse, local, backend.q_indptr_decode[: bs + 1], layer)


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
# expect: SG203
def decode_dcp_conditional_v2(backend: TRTLLMMLABackend, query, kv_cache, layer, forward_batch):
    parallel = get_parallel()
    meta = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    glob = forward_batch.seq_lens[:bs].to(torch.int32)
    local = (
        glob
        if parallel.attn_dcp_size >= 1
        else get_dcp_lens(glob, parallel.attn_dcp_size, parallel.attn_dcp_rank).to(torch.int32)
    )
    if parallel.dcp_enabled:
        raw_out, lse = backend._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=meta.block_kv_indices,
            seq_lens=local, max_seq_len=meta.max_seq_len_k, layer=layer, return_lse=True,
        )
        return _finish_dcp(raw_out, lse, local, backend.q_indptr_decode[: bs + 1], layer)
    raw_out = backend._run_decode_kernel(
        query=query, kv_cache=kv_cache, block_tables=meta.block_kv_indices,
        seq_lens=local, max_seq_len=meta.max_seq_len_k, layer=layer,
    )
    return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
# expect: clean
def decode_dcp_conditional(backend: TRTLLMMLABackend, query, kv_cache, layer, forward_batch):
    parallel = get_parallel()
    meta = forward_batch.decode_trtllm_mla_metadata
    bs = forward_batch.batch_size
    glob = forward_batch.seq_lens[:bs].to(torch.int32)
    local = (
        glob
        if parallel.attn_dcp_size == 1
        else get_dcp_lens(glob, parallel.attn_dcp_size, parallel.attn_dcp_rank).to(torch.int32)
    )
    if parallel.dcp_enabled:
        raw_out, lse = backend._run_decode_kernel(
            query=query, kv_cache=kv_cache, block_tables=meta.block_kv_indices,
            seq_lens=local, max_seq_len=meta.max_seq_len_k, layer=layer, return_lse=True,
        )
        return _finish_dcp(raw_out, lse, local, backend.q_indptr_decode[: bs + 1], layer)
    raw_out = backend._run_decode_kernel(
        query=query, kv_cache=kv_cache, block_tables=meta.block_kv_indices,
        seq_lens=local, max_seq_len=meta.max_seq_len_k, layer=layer,
    )
    return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (post-pad metadata backstop)
# expect: SG203
def refresh_metadata_after_pad(backend: TRTLLMMLABackend, forward_batch: ForwardBatch):
    old = getattr(forward_batch, "decode_trtllm_mla_metadata", None) or backend.forward_decode_metadata
    bs = forward_batch.batch_size
    if getattr(old, "batch_size", None) == bs:
        return old
    glob = forward_batch.seq_lens[:bs].to(torch.int32)
    max_seq = backend.max_context_len if forward_batch.seq_lens_cpu is None else int(
        forward_batch.seq_lens_cpu.max().item()
    )
    new = dataclasses.replace(
        old,
        seq_lens_k=glob,
        global_seq_lens_k=glob if get_parallel().dcp_enabled else None,
        block_kv_indices=backend._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, backend._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices, glob, glob.device,
        ),
        max_seq_len_k=backend._get_dcp_local_max_seq_len(max_seq),
    )
    new.batch_size = bs
    forward_batch.decode_trtllm_mla_metadata = new
    backend.forward_decode_metadata = new
    return new


# idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (post-pad metadata backstop)
# expect: clean
def refresh_metadata_after_pad_v2(backend: TRTLLMMLABackend, forward_batch: ForwardBatch):
    old = getattr(forward_batch, "decode_trtllm_mla_metadata", None) or backend.forward_decode_metadata
    bs = forward_batch.batch_size
    if getattr(old, "batch_size", None) == bs:
        return old
    glob = forward_batch.seq_lens[:bs].to(torch.int32)
    max_seq = backend.max_context_len if forward_batch.seq_lens_cpu is None else int(
        forward_batch.seq_lens_cpu.max().item()
    )
    new = dataclasses.replace(
        old,
        seq_lens_k=backend._get_dcp_local_seq_lens(glob),
        global_seq_lens_k=glob if get_parallel().dcp_enabled else None,
        block_kv_indices=backend._create_block_kv_indices(
            forward_batch.kv_loc_plan, bs, backend._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices, glob, glob.device,
        ),
        max_seq_len_k=backend._get_dcp_local_max_seq_len(max_seq),
    )
    new.batch_size = bs
    forward_batch.decode_trtllm_mla_metadata = new
    backend.forward_decode_metadata = new
    return new
