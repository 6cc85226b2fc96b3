"""Fork variants of the cute-dsl MLA backend (decode context parallel).

``CuteDslMLABackend._run_decode_kernel`` forwards ``seq_lens`` (what the kernel
walks through this rank's page table) and ``causal_seqs`` (the global causal
bound) to flashinfer's in-kernel DCP path.  The classes below reorganise the
DCP decode around fork features (hoisted lengths, micro-batching, ...).
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import (
    CuteDslMLABackend,
    CuteDslMLAMultiStepDraftBackend,
)
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg21.attn._mla_common import MLAQueryPrepMixin
from blindsg21.attn.mla_launch import mla_decode
from blindsg21.common.dcp_lens import DcpLens, cp_local_lens, split_global_and_local

if is_flashinfer_available():
    import flashinfer


class _DcpDecodeBase(MLAQueryPrepMixin, CuteDslMLABackend):
    """Routes the DCP decode through ``_dcp_decode``; everything else goes to
    the upstream cute-dsl backend."""

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if (
            not get_parallel().dcp_enabled
            or get_in_autotune_dummy_run()
            or cos_sin_cache is not None
            or llama_4_scaling is not None
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        query = query.unsqueeze(1)
        return self._dcp_decode(
            query, self._paged_kv(layer), self._decode_md(forward_batch), layer, forward_batch
        )

    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        return self._dcp_decode_from_md(query, kv_cache, md, layer, forward_batch)

    def _dcp_decode_from_md(self, query, kv_cache, md, layer, forward_batch):
        """The upstream hoisted path: both length views from the metadata."""
        parallel = get_parallel()
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k[:bs],
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=md.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, md.seq_lens_k[:bs], layer, bs)


class GlobalLensCuteDslBackend(MLAQueryPrepMixin, CuteDslMLABackend):
    """Reads the lengths straight from the batch instead of the hoisted
    metadata (the metadata is shared with the draft backends)."""

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or cos_sin_cache is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        md = self._decode_md(forward_batch)
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=self._paged_kv(layer),
            block_tables=md.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, seq_lens, layer, bs)


class LocalLensCuteDslBackend(MLAQueryPrepMixin, CuteDslMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled or cos_sin_cache is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        md = self._decode_md(forward_batch)
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query.unsqueeze(1),
            kv_cache=self._paged_kv(layer),
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class SplitLensCuteDslBackend(_DcpDecodeBase):
    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        local_lens, global_lens = split_global_and_local(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class OrderedSplitCuteDslBackend(_DcpDecodeBase):
    # expect: clean
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens, local_lens = split_global_and_local(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class CpLensCuteDslBackend(_DcpDecodeBase):
    """Shares the length helper with the prefill-CP MLA path."""

    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = cp_local_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class ClampedCuteDslBackend(_DcpDecodeBase):
    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        # cute-dsl's split-KV scheduler rejects zero-length rows (padded DP rows).
        seq_lens = torch.clamp(forward_batch.seq_lens[:bs], min=1).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=forward_batch.seq_lens[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, seq_lens, layer, bs)


class ClampedLocalCuteDslBackend(_DcpDecodeBase):
    # expect: clean
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        # Bound by what the (captured-width) page table can address.
        table_tokens = md.block_kv_indices.shape[1] * self.page_size
        local_lens = torch.clamp(md.seq_lens_k[:bs], max=table_tokens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=md.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class LensPropertyCuteDslBackend(_DcpDecodeBase):
    @property
    def decode_seq_lens(self) -> torch.Tensor:
        md = self.forward_decode_metadata
        # global_seq_lens_k is only populated under DCP and is the full length
        # of each request; prefer it when present.
        if md.global_seq_lens_k is not None:
            return md.global_seq_lens_k
        return md.seq_lens_k

    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        kernel_lens = self.decode_seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=md.global_seq_lens_k[:bs],
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, md.seq_lens_k[:bs], layer, bs)


class DcpLensCuteDslBackend(_DcpDecodeBase):
    # expect: clean
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        lens = DcpLens.of(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=lens.kernel_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=lens.causal_bound,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, lens.kernel_lens, layer, bs)


class ClosureLaunchCuteDslBackend(_DcpDecodeBase):
    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_lens = md.global_seq_lens_k[:bs]

        def launch(kv_lens):
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=md.max_seq_len_k,
                layer=layer,
                causal_seqs=global_lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )

        raw_out, lse = launch(global_lens)
        return self._rank_local_state(raw_out, lse, md.seq_lens_k[:bs], layer, bs)


class DirectCuteLaunchBackend(CuteDslMLABackend):
    """Launches the DCP kernel itself so the LSE lands in a persistent buffer
    the cross-rank merge reads in place."""

    def _lse_buffer(self, query: torch.Tensor) -> torch.Tensor:
        rows = query.shape[0] * query.shape[1]
        buf = getattr(self, "_dcp_lse_buf", None)
        if buf is None or buf.shape[0] < rows:
            buf = torch.empty(
                (rows, query.shape[2]), dtype=torch.float32, device=query.device
            )
            self._dcp_lse_buf = buf
        return buf[:rows]

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1:
            return super()._run_decode_kernel(
                query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        causal = causal_seqs.to(torch.int32)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=causal,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal,
            lse=self._lse_buffer(query),
            return_lse=True,
        )


class DirectCuteLaunchBackendFixed(DirectCuteLaunchBackend):
    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer,
        *,
        causal_seqs: Optional[torch.Tensor] = None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1:
            return CuteDslMLABackend._run_decode_kernel(
                self, query, kv_cache, block_tables, seq_lens, max_seq_len, layer,
                causal_seqs=causal_seqs, cp_world=cp_world, cp_rank=cp_rank,
                return_lse=return_lse,
            )
        if causal_seqs is None:
            raise ValueError("DCP MLA decode needs the global causal bound")
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
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal_seqs.to(torch.int32),
            lse=self._lse_buffer(query),
            return_lse=True,
        )


class VerifyCuteDslBackend(MLAQueryPrepMixin, CuteDslMLABackend):
    """Runs DCP target-verify on cute-dsl instead of refusing it."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if (
            not forward_batch.forward_mode.is_target_verify()
            or not get_parallel().dcp_enabled
            or cos_sin_cache is not None
            or get_in_autotune_dummy_run()
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        md = self._decode_md(forward_batch)
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = mla_decode(
            self,
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            md.seq_lens_k,
            md.max_seq_len_k,
            layer,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, md.seq_lens_k, self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class CausalVerifyCuteDslBackend(MLAQueryPrepMixin, CuteDslMLABackend):
    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if (
            not forward_batch.forward_mode.is_target_verify()
            or not get_parallel().dcp_enabled
            or cos_sin_cache is not None
            or get_in_autotune_dummy_run()
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        md = self._decode_md(forward_batch)
        query = self._prep_query(q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope)
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = mla_decode(
            self,
            query,
            self._paged_kv(layer),
            md.block_kv_indices,
            md.seq_lens_k,
            md.max_seq_len_k,
            layer,
            causal_lens=md.global_seq_lens_k,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, md.seq_lens_k, self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class StepLensCuteDslDraftBackend(CuteDslMLAMultiStepDraftBackend):
    """Gives each DCP draft step its own KV length (prefix + draft tokens so
    far); without DCP the upstream per-step metadata is kept."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_idle() or not get_parallel().dcp_enabled:
            return
        if forward_batch.seq_lens_cpu is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max())
        else:
            max_seq = self.max_context_len
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            md = backend.forward_decode_metadata
            step_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            md.global_seq_lens_k = step_lens
            md.seq_lens_k = step_lens
            md.max_seq_len_k = backend._get_dcp_local_max_seq_len(max_seq + i + 1)
        # Each step reads its own backend's metadata.
        forward_batch.decode_trtllm_mla_metadata = None


class StepLocalLensCuteDslDraftBackend(CuteDslMLAMultiStepDraftBackend):
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_idle() or not get_parallel().dcp_enabled:
            return
        if forward_batch.seq_lens_cpu is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max())
        else:
            max_seq = self.max_context_len
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            md = backend.forward_decode_metadata
            step_lens = (forward_batch.seq_lens + (i + 1)).to(torch.int32)
            local_lens = backend._get_dcp_local_seq_lens(step_lens)
            md.global_seq_lens_k = step_lens
            md.seq_lens_k = local_lens
            # Rebuild this step's page table over its own (local) length.
            md.block_kv_indices = backend._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                forward_batch.batch_size,
                backend._calc_padded_blocks(max_seq + self.speculative_num_steps),
                forward_batch.req_pool_indices,
                step_lens,
                step_lens.device,
            )
            md.max_seq_len_k = backend._get_dcp_local_max_seq_len(max_seq + i + 1)
        forward_batch.decode_trtllm_mla_metadata = None
