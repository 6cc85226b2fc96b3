"""trtllm_mla backend variants carried by the fork for DCP decode.

Each class overrides one step of ``TRTLLMMLABackend``; ``ForkTRTLLMMLABackend``
adds the extra entry points the fork's fused MLA layer calls directly.
"""

from __future__ import annotations

import logging
from typing import Iterator, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg10.attn.kernels import decode_metadata, kv_cache_view

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


def _iter_row_slices(bs: int, max_rows: int) -> Iterator[slice]:
    for start in range(0, bs, max_rows):
        yield slice(start, min(bs, start + max_rows))


def _rank_local_state(layer, raw_out, lse, local_seq_lens, q_indptr, q_len):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    # A rank with no slice of a request contributes (out=0, lse=-inf).
    fixup_zero_kv_rows(output, lse, local_seq_lens, q_indptr, q_len)
    return output.flatten(1), lse


class StatsTRTLLMMLABackend(TRTLLMMLABackend):
    """Counts requests this DCP rank holds no KV for (load-balance telemetry)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dcp_empty_rows: Optional[torch.Tensor] = None

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        # Device-side counter, read by the metrics thread; no sync here.
        self.dcp_empty_rows = (local_seq_lens == 0).sum()
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _rank_local_state(
            layer, raw_out, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )


class HoistedLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Reads the int32 lens that metadata init hoists once per step."""

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # Prefer the hoisted int32 buffer (filled once per step by metadata init
        # and graph replay-prep) over a per-layer conversion.
        kv_lens = metadata.global_seq_lens_k
        if kv_lens is None:
            kv_lens = forward_batch.seq_lens.to(torch.int32)
        kv_lens = kv_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _rank_local_state(
            layer, raw_out, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1
        )


class DcpVerifyTRTLLMMLABackend(TRTLLMMLABackend):
    """Keeps MTP on for trtllm_mla deployments that enable DCP.

    Under DCP this backend already builds a rank-local page table and
    rank-local ``seq_lens_k``, so the fork launches trtllm-gen on them
    directly instead of refusing every launch but plain decode.
    """

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
        if not get_parallel().dcp_enabled:
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
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            # The cross-rank merge always needs the rank-local LSE.
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class RefusingDcpTRTLLMMLABackend(TRTLLMMLABackend):
    """Sends DCP launches that need a causal bound to the cute-dsl kernel."""

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
        parallel = get_parallel()
        q_len = query.shape[1] if query.dim() == 4 else 1
        if not parallel.dcp_enabled or (q_len == 1 and causal_seqs is None):
            # Plain decode (one token, rank-local table) is fine on trtllm-gen.
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
        if causal_seqs is None:
            raise NotImplementedError(
                f"DCP decode with q_len={q_len} needs the global causal bound"
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
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=causal_seqs.to(torch.int32),
            return_lse=True,
        )


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    """Extra decode entry points used by the fork's fused MLA layer."""

    def _dcp_out(self, layer, out, local_seq_lens, bs: int):
        raw_out, lse = out
        return _rank_local_state(
            layer, raw_out, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )

    # expect: clean
    def decode_single_token_dcp(self, query, layer, forward_batch):
        """One query token per request: the rank-local table and lens describe
        this rank's shard completely, no causal bound needed."""
        bs = forward_batch.batch_size
        if query.dim() == 3:
            query = query.unsqueeze(1)
        if query.shape[1] != 1:
            raise ValueError("decode_single_token_dcp takes one token per request")
        metadata = decode_metadata(self, forward_batch)
        if not get_parallel().dcp_enabled:
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k[:bs],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._dcp_out(layer, out, local_seq_lens, bs)

    def _fresh_block_table(self, forward_batch, seq_lens):
        bs = forward_batch.batch_size
        if forward_batch.seq_lens_cpu is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max())
        else:
            max_seq = self.max_context_len
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices[:bs],
            seq_lens,
            seq_lens.device,
        )
        return block_kv_indices, max_seq

    # expect: SG203
    def decode_with_fresh_block_table(self, query, layer, forward_batch):
        """Decode against a freshly built block table (the KV-offload path
        rewrites req_to_token between metadata init and this layer)."""
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        block_kv_indices, max_seq = self._fresh_block_table(forward_batch, seq_lens)
        dcp_enabled = get_parallel().dcp_enabled
        max_seq_len = self._get_dcp_local_max_seq_len(max_seq) if dcp_enabled else max_seq
        out = self._run_decode_kernel(
            query=query if query.dim() == 4 else query.unsqueeze(1),
            kv_cache=kv_cache_view(self, layer),
            block_tables=block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=dcp_enabled,
        )
        if dcp_enabled:
            return self._dcp_out(layer, out, seq_lens, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None

    # expect: clean
    def decode_with_fresh_block_table_local(self, query, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        # _create_block_kv_indices localizes the table itself under DCP.
        block_kv_indices, max_seq = self._fresh_block_table(forward_batch, seq_lens)
        dcp_enabled = get_parallel().dcp_enabled
        kernel_seq_lens = self._get_dcp_local_seq_lens(seq_lens)
        max_seq_len = self._get_dcp_local_max_seq_len(max_seq)
        out = self._run_decode_kernel(
            query=query if query.dim() == 4 else query.unsqueeze(1),
            kv_cache=kv_cache_view(self, layer),
            block_tables=block_kv_indices,
            seq_lens=kernel_seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=dcp_enabled,
        )
        if dcp_enabled:
            return self._dcp_out(layer, out, kernel_seq_lens, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None

    # expect: SG203
    def verify_dcp_rank_local(self, q, layer, forward_batch):
        """DCP target verify: each rank scores the draft window on its share."""
        if not get_parallel().dcp_enabled:
            raise RuntimeError("verify_dcp_rank_local is the DCP-only verify path")
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.to(self.data_type).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache_view(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return _rank_local_state(
            layer,
            raw_out,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )

    # expect: clean
    def draft_extend_dense(self, q, layer, forward_batch):
        """Dense draft extend (every request extends the same number of rows)."""
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm_mla cannot forward a global causal bound to its decode "
                "kernel; draft extend with DCP needs cutedsl_mla"
            )
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = q.shape[0] // bs
        q = q.to(self.data_type).view(
            bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim
        )
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def verify_dcp_cute(self, q, layer, forward_batch):
        """DCP target verify through the cute-dsl kernel (takes the global bound)."""
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("verify_dcp_cute is the DCP-only verify path")
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        q = q.to(self.data_type).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache_view(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=kv_lens,
            return_lse=True,
        )
        return _rank_local_state(
            layer,
            raw_out,
            lse,
            kv_lens,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )

    # expect: clean
    def verify_dcp_cute_localized(self, q, layer, forward_batch):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("verify_dcp_cute_localized is the DCP-only verify path")
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_kv_lens = self._get_dcp_local_seq_lens(global_kv_lens)
        q = q.to(self.data_type).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache_view(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_kv_lens,
            return_lse=True,
        )
        return _rank_local_state(
            layer,
            raw_out,
            lse,
            local_kv_lens,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )

    # expect: SG203
    def decode_hoisted(self, query, layer, forward_batch):
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        kv_cache = kv_cache_view(self, layer)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        if not get_parallel().dcp_enabled:
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=(
                    metadata.seq_lens_k
                    if metadata.seq_lens_k is not None
                    else forward_batch.seq_lens
                ),
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        seq_lens = (
            metadata.seq_lens_k
            if metadata.seq_lens_k is not None
            else forward_batch.seq_lens
        )[:bs]
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._dcp_out(layer, out, seq_lens, bs)

    # expect: clean
    def decode_hoisted_localized(self, query, layer, forward_batch):
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        kv_cache = kv_cache_view(self, layer)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        if not get_parallel().dcp_enabled:
            out = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=(
                    metadata.seq_lens_k
                    if metadata.seq_lens_k is not None
                    else forward_batch.seq_lens
                ),
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        if metadata.seq_lens_k is not None:
            seq_lens = metadata.seq_lens_k[:bs]
        else:
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._dcp_out(layer, out, seq_lens, bs)

    # expect: SG203
    def decode_in_row_slices(self, query, layer, forward_batch, max_rows: int = 256):
        """Split very large decode batches so the multi-CTA counter buffer fits."""
        dcp_enabled = get_parallel().dcp_enabled
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        kv_cache = kv_cache_view(self, layer)
        query = query if query.dim() == 4 else query.unsqueeze(1)
        outs, lses = [], []
        for rows in _iter_row_slices(bs, max_rows):
            out = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=forward_batch.seq_lens[rows],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=dcp_enabled,
            )
            if dcp_enabled:
                raw_out, lse = out
                outs.append(raw_out)
                lses.append(lse)
            else:
                outs.append(out)
        raw_out = torch.cat(outs)
        if not dcp_enabled:
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        return _rank_local_state(
            layer,
            raw_out,
            torch.cat(lses),
            local_seq_lens,
            self.q_indptr_decode[: bs + 1],
            1,
        )

    # expect: clean
    def decode_in_row_slices_local(
        self, query, layer, forward_batch, max_rows: int = 256
    ):
        dcp_enabled = get_parallel().dcp_enabled
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        kv_cache = kv_cache_view(self, layer)
        query = query if query.dim() == 4 else query.unsqueeze(1)
        # seq_lens_k is rank-local under DCP and the plain lens otherwise.
        kernel_seq_lens = metadata.seq_lens_k
        outs, lses = [], []
        for rows in _iter_row_slices(bs, max_rows):
            out = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=kernel_seq_lens[rows],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=dcp_enabled,
            )
            if dcp_enabled:
                raw_out, lse = out
                outs.append(raw_out)
                lses.append(lse)
            else:
                outs.append(out)
        raw_out = torch.cat(outs)
        if not dcp_enabled:
            return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
        return _rank_local_state(
            layer,
            raw_out,
            torch.cat(lses),
            kernel_seq_lens[:bs],
            self.q_indptr_decode[: bs + 1],
            1,
        )


class StepCacheTRTLLMMLABackend(TRTLLMMLABackend):
    """Caches the step's int32 lengths for the fused MLA layer."""

    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        # Converted once per step instead of once per layer.
        self._step_seq_lens_i32 = forward_batch.seq_lens.to(torch.int32)

    # expect: SG203
    def decode_cached(self, query, layer, forward_batch):
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        query = query if query.dim() == 4 else query.unsqueeze(1)
        if get_parallel().dcp_enabled:
            seq_lens = self._step_seq_lens_i32[:bs]
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return _rank_local_state(
                layer, raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1
            )
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_seq_lens_i32[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None


class LocalStepCacheTRTLLMMLABackend(TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch):
        super().init_forward_metadata(forward_batch)
        # Rank-local under DCP (identity otherwise), int32, once per step.
        self._step_kernel_seq_lens = self._get_dcp_local_seq_lens(
            forward_batch.seq_lens
        ).to(torch.int32)

    # expect: clean
    def decode_cached(self, query, layer, forward_batch):
        metadata = decode_metadata(self, forward_batch)
        bs = forward_batch.batch_size
        query = query if query.dim() == 4 else query.unsqueeze(1)
        seq_lens = self._step_kernel_seq_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=seq_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return _rank_local_state(
                layer, raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1
            )
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None


class PropLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def _step_kv_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        if md is None:
            return None
        # global_seq_lens_k is only filled on steps that need it; when present
        # it is the freshest int32 copy of this step's lengths.
        return md.global_seq_lens_k if md.global_seq_lens_k is not None else md.seq_lens_k

    # expect: SG203
    def decode_step(self, query, layer, forward_batch):
        metadata = self.forward_decode_metadata
        bs = forward_batch.batch_size
        query = query if query.dim() == 4 else query.unsqueeze(1)
        kv_lens = self._step_kv_lens
        if kv_lens is None:
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        kv_lens = kv_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return _rank_local_state(
                layer, raw_out, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1
            )
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None


class LocalPropLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def _step_kv_lens(self) -> Optional[torch.Tensor]:
        md = self.forward_decode_metadata
        # seq_lens_k: rank-local under DCP, the plain lens otherwise.
        return None if md is None else md.seq_lens_k

    # expect: clean
    def decode_step(self, query, layer, forward_batch):
        metadata = self.forward_decode_metadata
        bs = forward_batch.batch_size
        query = query if query.dim() == 4 else query.unsqueeze(1)
        kv_lens = self._step_kv_lens
        if kv_lens is None:
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)
        kv_lens = kv_lens[:bs]
        if get_parallel().dcp_enabled:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache_view(self, layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return _rank_local_state(
                layer, raw_out, lse, kv_lens, self.q_indptr_decode[: bs + 1], 1
            )
        out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache_view(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim), None
