"""trtllm_mla forks for decode context parallelism (DCP).

Each class here overrides one step of TRTLLMMLABackend's DCP decode; the
deployment picks one through the fork's attention-backend registry.
"""

from __future__ import annotations

from typing import Optional

import flashinfer
import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import get_bool_env_var

from blindsg11.util.dcp_lens import iter_row_chunks
from blindsg11.util.mla_inputs import MlaDecodeInputsMixin


class _DcpDecodeBase(MlaDecodeInputsMixin, TRTLLMMLABackend):
    def _finish_dcp(self, raw_out, lse, layer, local_lens, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


# ----------------------------------------------------------------------------
# Fallback lengths when the metadata carries none
# ----------------------------------------------------------------------------
class PagedDcpTRTLLMMLABackend(_DcpDecodeBase):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch,
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            # Metadata rebuilt by the page-table refresh carries no lens; the
            # batch's lengths are what the table was filled from.
            kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)


class LocalFallbackDcpTRTLLMMLABackend(_DcpDecodeBase):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer,
        forward_batch,
    ):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            kv_lens = get_dcp_lens(
                forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)


# ----------------------------------------------------------------------------
# Hoisted int32 lens exposed through a property
# ----------------------------------------------------------------------------
class HoistedLensDcpBackend(_DcpDecodeBase):
    @property
    def _hoisted_kv_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        if md is None:
            return None
        # global_seq_lens_k is written once per step by init / graph replay-prep
        # and is already int32; no per-layer conversion.
        return md.global_seq_lens_k

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
        if not get_parallel().dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = self._hoisted_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)


class HoistedLocalLensDcpBackend(_DcpDecodeBase):
    @property
    def _hoisted_kv_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        if md is None:
            return None
        # Under DCP seq_lens_k is this rank's share (global_seq_lens_k keeps
        # the whole-sequence lens for the cute-dsl causal bound).
        return md.seq_lens_k

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
        if not get_parallel().dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = self._hoisted_kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)


# ----------------------------------------------------------------------------
# Early returns
# ----------------------------------------------------------------------------
class EarlyReturnDcpBackend(_DcpDecodeBase):
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
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if query.shape[1] == 1:
            # One query token per request: no per-row causal bound to place,
            # so the plain decode launch covers DCP and non-DCP alike.
            kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=md.max_seq_len_k,
                layer=layer,
                return_lse=parallel.dcp_enabled,
            )
            if parallel.dcp_enabled:
                raw_out, lse = out
                return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return self._forward_decode_dcp(query, kv_cache, md, layer, forward_batch)


class EarlyReturnLocalDcpBackend(_DcpDecodeBase):
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
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        if not get_parallel().dcp_enabled:
            # Replicated KV: the whole-sequence lens are this rank's lens.
            raw_out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices,
                seq_lens=forward_batch.seq_lens[:bs],
                max_seq_len=md.max_seq_len_k,
                layer=layer,
            )
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        return self._forward_decode_dcp(query, kv_cache, md, layer, forward_batch)


# ----------------------------------------------------------------------------
# Debug knob
# ----------------------------------------------------------------------------
class EnvGatedDcpBackend(_DcpDecodeBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if get_bool_env_var("SGLANG_DCP_DECODE_BATCH_LENS"):
            # Bypass the hoisted metadata lens while hunting graph-replay
            # staleness; the batch lens are always fresh.
            kv_lens = forward_batch.seq_lens[:bs]
        else:
            kv_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)


class EnvGatedLocalDcpBackend(_DcpDecodeBase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if get_bool_env_var("SGLANG_DCP_DECODE_BATCH_LENS"):
            # Fresh lens from the batch, reduced to this rank's share.
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        else:
            kv_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, kv_lens, bs)


# ----------------------------------------------------------------------------
# Lens cached on the backend by init_forward_metadata
# ----------------------------------------------------------------------------
class CachedLensDcpBackend(_DcpDecodeBase):
    _step_kv_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            # One int32 conversion per step instead of one per layer.
            self._step_kv_lens = forward_batch.seq_lens.to(torch.int32)

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
        if not get_parallel().dcp_enabled or self._step_kv_lens is None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, self._step_kv_lens[:bs], bs)


class CachedLocalLensDcpBackend(_DcpDecodeBase):
    _step_kv_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._step_kv_lens = self._get_dcp_local_seq_lens(
                forward_batch.seq_lens
            ).to(torch.int32)

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
        if not get_parallel().dcp_enabled or self._step_kv_lens is None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, self._step_kv_lens[:bs], bs)


# ----------------------------------------------------------------------------
# Chunked launches (bounded trtllm-gen workspace on GB300 multi-node)
# ----------------------------------------------------------------------------
class ChunkedDcpBackend(_DcpDecodeBase):
    max_rows_per_launch: int = 64

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        outs, lses = [], []
        for rows in iter_row_chunks(bs, self.max_rows_per_launch):
            raw_out, lse = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=forward_batch.seq_lens[rows],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._finish_dcp(
            torch.cat(outs), torch.cat(lses), layer, metadata.seq_lens_k[:bs], bs
        )


class ChunkedLocalDcpBackend(_DcpDecodeBase):
    max_rows_per_launch: int = 64

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local_lens = metadata.seq_lens_k[:bs]
        outs, lses = [], []
        for rows in iter_row_chunks(bs, self.max_rows_per_launch):
            raw_out, lse = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=local_lens[rows],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._finish_dcp(torch.cat(outs), torch.cat(lses), layer, local_lens, bs)


# ----------------------------------------------------------------------------
# Kernel hook: what DCP launches trtllm-gen may take
# ----------------------------------------------------------------------------
class RelaxedTRTLLMMLABackend(TRTLLMMLABackend):
    """Lets MTP + DCP run on trtllm-gen (no cute-dsl wheel on this cluster)."""

    # expect: SG203
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        dcp = get_parallel().dcp_enabled
        if dcp and q_len == 1 and not return_lse:
            raise NotImplementedError("DCP decode must return the rank-local LSE")
        # seq_lens already holds this rank's share (metadata init / graph
        # replay-prep localize it), and the page table lists only this rank's
        # pages, which is all trtllm-gen walks.
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
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse or dcp,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class StrictTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world=1,
        cp_rank=0,
        return_lse=False,
    ):
        q_len = query.shape[1] if query.dim() == 4 else 1
        dcp = get_parallel().dcp_enabled
        if dcp and (q_len > 1 or causal_seqs is not None):
            raise NotImplementedError(
                "trtllm-gen has no global causal bound; DCP verify / draft "
                "extend needs cutedsl_mla"
            )
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
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse or dcp,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


# ----------------------------------------------------------------------------
# Draft extend under DCP
# ----------------------------------------------------------------------------
class DraftExtendDcpBackend(_DcpDecodeBase):
    # expect: SG203
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
        query, kv_cache = self._extend_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = query.shape[1]
        # Rank-local lens + rank-local page table: the draft-extend rows of
        # one request all read within this rank's slice.
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k,
            max_seq_len=md.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        output = raw_out.view(bs * tokens_per_req, layer.tp_q_head_num, layer.v_head_dim)
        return output.flatten(1), lse.view(bs * tokens_per_req, layer.tp_q_head_num)


class DraftExtendRefusingDcpBackend(_DcpDecodeBase):
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
        if forward_batch.forward_mode.is_draft_extend_v2() and get_parallel().dcp_enabled:
            raise NotImplementedError(
                "draft extend under DCP needs a global causal bound; "
                "use --attention-backend cutedsl_mla"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )
