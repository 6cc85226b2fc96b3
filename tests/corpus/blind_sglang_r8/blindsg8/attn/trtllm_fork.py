"""trtllm_mla / cutedsl_mla backend overrides used by our DCP deployments."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg8.attn.dcp_lens import rank_local_lens

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------
# Shared plumbing (bf16 KV only in our deployments).
# ---------------------------------------------------------------------------
def _prepare_decode_query(
    backend: TRTLLMMLABackend,
    q: torch.Tensor,
    k: torch.Tensor,
    layer: "RadixAttention",
    forward_batch: "ForwardBatch",
    save_kv_cache: bool,
    q_rope: Optional[torch.Tensor],
    k_rope: Optional[torch.Tensor],
):
    if save_kv_cache:
        backend.token_to_kv_pool.set_mla_kv_buffer(
            layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
        )
    if q_rope is not None:
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = concat_mla_absorb_q_general(q_nope, q_rope)
    else:
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
    if query.dim() == 3:
        query = query.unsqueeze(1)
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    kv_cache = paged_row_view(k_cache, backend.page_size).unsqueeze(1)
    return query, kv_cache


def _decode_metadata(backend: TRTLLMMLABackend, forward_batch: "ForwardBatch"):
    return (
        getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        or backend.forward_decode_metadata
    )


def _finish_dcp_decode(backend, raw_out, lse, layer, local_seq_lens, bs):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_seq_lens, backend.q_indptr_decode[: bs + 1], 1)
    return output.flatten(1), lse


# ---------------------------------------------------------------------------
# trtllm-gen DCP decode (q_len == 1) overrides.
# ---------------------------------------------------------------------------
class LeanDcpTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # Metadata can be stale after a DP pad; take the lengths from the live
        # batch instead of the hoisted buffer.
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, layer, seq_lens, bs)


class LiveLensDcpTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # Metadata can be stale after a DP pad; take the lengths from the live
        # batch and shard them to this rank.
        seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, layer, seq_lens, bs)


class DecodeOnlyDcpTRTLLMMLABackend(TRTLLMMLABackend):
    """Eager metadata for decode / verify without the draft-extend branches."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        mode = forward_batch.forward_mode
        if not (mode.is_decode_or_idle() or mode.is_target_verify()):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        metadata = TRTLLMMLADecodeMetadata()
        seq_lens = forward_batch.seq_lens
        max_seq = self.max_context_len
        if mode.is_target_verify():
            self.forward_prefill_metadata = None
            seq_lens = seq_lens + self.num_draft_tokens
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = int(max_seq)
        metadata.batch_size = bs
        parallel = get_parallel()
        if parallel.dcp_enabled and mode.is_target_verify():
            # Verify needs the global causal bound next to the local lengths.
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
        if parallel.dcp_enabled:
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k
            )
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata


class DecodeVerifyDcpTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        mode = forward_batch.forward_mode
        if not (mode.is_decode_or_idle() or mode.is_target_verify()):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        metadata = TRTLLMMLADecodeMetadata()
        seq_lens = forward_batch.seq_lens
        max_seq = self.max_context_len
        if mode.is_target_verify():
            self.forward_prefill_metadata = None
            seq_lens = seq_lens + self.num_draft_tokens
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = int(max_seq)
        metadata.batch_size = bs
        parallel = get_parallel()
        if parallel.dcp_enabled:
            # Decode and verify both read this rank's slice; keep the global
            # lengths for the causal bound / merge.
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k
            )
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata


class GraphDecodeDcpTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self, bs, req_pool_indices, seq_lens, forward_mode, metadata
    ):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
            table_lens = metadata.seq_lens_k
        else:
            # A decode row has one query token, so only verify needs the
            # local/global split; refresh both buffers from the batch.
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(seq_lens[:bs])
            table_lens = self._get_dcp_local_seq_lens(seq_lens[:bs])
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], table_lens
        )


class GraphDecodeLocalDcpTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self, bs, req_pool_indices, seq_lens, forward_mode, metadata
    ):
        if forward_mode.is_target_verify():
            torch.add(seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k)
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
        else:
            metadata.global_seq_lens_k.copy_(seq_lens[:bs])
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens[:bs]))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )


# ---------------------------------------------------------------------------
# Kernel hook overrides.
# ---------------------------------------------------------------------------
class PermissiveTRTLLMMLABackend(TRTLLMMLABackend):
    """Lets DCP verify run on trtllm-gen (no cute-dsl build on our GB200s)."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if get_parallel().dcp_enabled:
            # Rank-local page table + LSE merge; the merge in forward_mla
            # handles the cross-rank softmax.
            return_lse = True
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
        )


class LoggingTRTLLMMLABackend(TRTLLMMLABackend):
    """Adds a diagnostic before the upstream refusal."""

    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().dcp_enabled and (q_len > 1 or causal_seqs is not None):
            logger.error(
                "trtllm_mla got a %d-token DCP query for layer %d; use cutedsl_mla",
                q_len,
                layer.layer_id,
            )
            raise NotImplementedError(
                "trtllm_mla has no global causal bound for DCP q_len > 1"
            )
        return super()._run_decode_kernel(
            query,
            kv_cache,
            block_tables,
            seq_lens,
            max_seq_len,
            layer,
            causal_seqs=causal_seqs,
            cp_world=cp_world,
            cp_rank=cp_rank,
            return_lse=return_lse,
        )


class HelperRefusedTRTLLMMLABackend(TRTLLMMLABackend):
    """Draft extend under DCP goes straight to the decode hook, whose DCP
    guard rejects the multi-token query (no global causal bound)."""

    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not (
            forward_batch.forward_mode.is_draft_extend_v2()
            and get_parallel().dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = query.shape[0] // bs
        query = query.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            layer=layer,
            return_lse=True,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class FlattenedVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """DCP target verify on trtllm-gen: every draft token becomes its own
    single-token row with its own rank-local frontier (NPU DSA's layout)."""

    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        return self._forward_verify_dcp(query, kv_cache, layer, forward_batch)

    # expect: clean
    def _forward_verify_dcp(self, query, kv_cache, layer, forward_batch):
        parallel = get_parallel()
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        # Row j of request i attends up to prefix + j + 1 globally; count this
        # rank's share of that frontier.
        row_lens = get_dcp_chain_spec_lens(
            metadata.global_seq_lens_k[:bs], ndt, parallel.dcp_size, parallel.dcp_rank
        )
        block_tables = metadata.block_kv_indices[:bs].repeat_interleave(ndt, dim=0)
        rows = query.reshape(bs * ndt, 1, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=rows,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        row_indptr = torch.arange(bs * ndt + 1, dtype=torch.int32, device=output.device)
        fixup_zero_kv_rows(output, lse, row_lens, row_indptr, 1)
        return output.flatten(1), lse


# ---------------------------------------------------------------------------
# cute-dsl DCP decode overrides.
# ---------------------------------------------------------------------------
class _CuteDslDcpDecodeBase(CuteDslMLABackend):
    def _dcp_decode(self, query, kv_cache, metadata, layer, bs, local, global_):
        parallel = get_parallel()
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, layer, local, bs)


class FallbackCuteDslMLABackend(_CuteDslDcpDecodeBase):
    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            global_seq_lens = metadata.global_seq_lens_k[:bs]
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            # Captured metadata without the hoisted global buffer.
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_seq_lens = global_seq_lens
        return self._dcp_decode(
            query, kv_cache, metadata, layer, bs, local_seq_lens, global_seq_lens
        )


class HoistedCuteDslMLABackend(_CuteDslDcpDecodeBase):
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        if metadata.global_seq_lens_k is not None:
            global_seq_lens = metadata.global_seq_lens_k[:bs]
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        return self._dcp_decode(
            query, kv_cache, metadata, layer, bs, local_seq_lens, global_seq_lens
        )


class SwappedCuteDslMLABackend(CuteDslMLABackend):
    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        seq_lens_k = metadata.seq_lens_k[:bs]
        global_seq_lens_k = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return _finish_dcp_decode(self, raw_out, lse, layer, seq_lens_k, bs)


class TryMetaCuteDslMLABackend(_CuteDslDcpDecodeBase):
    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        try:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        except TypeError:
            # First eager step after a graph fallback: fields not populated.
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_seq_lens = forward_batch.seq_lens_cpu[:bs].to(
                device=global_seq_lens.device, dtype=torch.int32
            )
        return self._dcp_decode(
            query, kv_cache, metadata, layer, bs, local_seq_lens, global_seq_lens
        )


class TryMetaLocalCuteDslMLABackend(_CuteDslDcpDecodeBase):
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = _prepare_decode_query(
            self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = _decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        try:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        except TypeError:
            global_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_seq_lens = rank_local_lens(global_seq_lens)
        return self._dcp_decode(
            query, kv_cache, metadata, layer, bs, local_seq_lens, global_seq_lens
        )


class DraftExtendRefusingCuteDslMLABackend(CuteDslMLABackend):
    # expect: clean
    def forward_extend(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if (
            forward_batch.forward_mode.is_draft_extend_v2()
            and get_parallel().dcp_enabled
        ):
            raise NotImplementedError(
                "cutedsl_mla draft extend under DCP needs per-row causal bounds; "
                "run the draft model without decode context parallelism"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )


# ---------------------------------------------------------------------------
# Multi-step draft backend: refresh the per-step lengths in one place.
# ---------------------------------------------------------------------------
class DraftStepDcpMultiStepBackend(TRTLLMMLAMultiStepDraftBackend):
    # expect: SG203
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        dcp = get_parallel().dcp_enabled
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            backend.init_forward_metadata(forward_batch)
            metadata = backend.forward_decode_metadata
            # Step i reads the prefix plus the i + 1 draft tokens written so far.
            step_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            metadata.block_kv_indices = backend._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                forward_batch.batch_size,
                metadata.block_kv_indices.shape[1],
                forward_batch.req_pool_indices,
                step_lens,
                step_lens.device,
            )
            metadata.seq_lens_k = step_lens
            metadata.max_seq_len_k = backend.max_context_len
            if dcp:
                metadata.global_seq_lens_k = step_lens
                metadata.max_seq_len_k = backend._get_dcp_local_max_seq_len(
                    backend.max_context_len
                )


class DraftStepLocalDcpMultiStepBackend(TRTLLMMLAMultiStepDraftBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        dcp = get_parallel().dcp_enabled
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            backend.init_forward_metadata(forward_batch)
            metadata = backend.forward_decode_metadata
            step_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            # The table builder shards to this rank itself under DCP.
            metadata.block_kv_indices = backend._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                forward_batch.batch_size,
                metadata.block_kv_indices.shape[1],
                forward_batch.req_pool_indices,
                step_lens,
                step_lens.device,
            )
            if dcp:
                metadata.global_seq_lens_k = step_lens
                metadata.seq_lens_k = backend._get_dcp_local_seq_lens(step_lens)
                metadata.max_seq_len_k = backend._get_dcp_local_max_seq_len(
                    backend.max_context_len
                )
            else:
                metadata.seq_lens_k = step_lens
                metadata.max_seq_len_k = backend.max_context_len
