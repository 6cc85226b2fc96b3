"""Fork variants of the trtllm / cute-dsl MLA decode under DCP.

``ForkTRTLLMMLABackend`` keeps several rank-local decode strategies side by
side (selected by ``SGLANG_FORK_DCP_DECODE_VARIANT``) while we bisect a DCP
accuracy regression. Every strategy returns the rank-local ``(out, lse)``
that ``forward_mla`` merges across the DCP group.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.distributed.parallel_state import get_dcp_rank, get_dcp_world_size
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import (
    get_dcp_chain_spec_lens,
    get_dcp_lens,
    update_local_kv_lens_for_dcp,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils import is_flashinfer_available

from blindsg13.attn.dcp_lens import (
    DcpLens,
    build_mla_launch_kwargs,
    clamp_kv_lens,
    iter_decode_lens,
    iter_local_decode_lens,
    make_mla_decode_launcher,
    rank_local_kv_lens,
    whole_kv_lens,
)

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)

_VARIANT = os.environ.get("SGLANG_FORK_DCP_DECODE_VARIANT", "hoisted")


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla with fork-local DCP decode strategies."""

    # ------------------------------------------------------------------
    # helpers (unlabelled)
    # ------------------------------------------------------------------
    def _paged_kv(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _metadata_for(self, forward_batch: "ForwardBatch") -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _merge_ready(self, raw_out, lse, local_seq_lens, layer, bs: int):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    @property
    def _step_lens(self) -> torch.Tensor:
        """Lengths of the current decode step (as planned)."""
        return self.forward_decode_metadata.global_seq_lens_k

    @property
    def _step_local_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.seq_lens_k

    # ------------------------------------------------------------------
    # single-token DCP decode strategies
    # ------------------------------------------------------------------

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        """Recompute lengths from the batch: the planned metadata can be stale
        after the DP-padding backstop re-plan."""
        bs = forward_batch.batch_size
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
        return self._merge_ready(raw_out, lse, seq_lens, layer, bs)

    # expect: clean
    def decode_dcp_recomputed_local(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_seq_lens, layer, bs)

    # expect: SG203
    def decode_dcp_global_metadata(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: clean
    def decode_dcp_hoisted(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        """init_forward_metadata already stored the rank-local view in
        ``seq_lens_k`` (and the whole lengths in ``global_seq_lens_k``)."""
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local_seq_lens, layer, bs)

    # expect: SG203
    def decode_dcp_with_fallback(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else forward_batch.seq_lens[:bs]
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, seq_lens, layer, bs)

    # expect: clean
    def decode_dcp_with_local_fallback(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            seq_lens = metadata.seq_lens_k[:bs]
        else:
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, seq_lens, layer, bs)

    # expect: SG203
    def decode_dcp_property_lens(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        lens = self._step_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=self.forward_decode_metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=self.forward_decode_metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: clean
    def decode_dcp_property_local_lens(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        lens = self._step_local_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=self.forward_decode_metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=self.forward_decode_metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: SG203
    def decode_dcp_page_dependent(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        if self.page_size == 1:
            lens = get_dcp_lens(
                forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        else:
            # Paged layouts: the page table builder already walks this rank's
            # pages, so the kernel only needs the request lengths.
            lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: clean
    def decode_dcp_inplace_local(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens[:bs].to(torch.int32).clone()
        update_local_kv_lens_for_dcp(lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: SG203
    def decode_dcp_closure_lens(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size

        def _lens() -> torch.Tensor:
            return clamp_kv_lens(forward_batch.seq_lens[:bs])

        lens = _lens()
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: SG203
    def decode_dcp_try_fast_path(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        kv_cache = self._paged_kv(layer)
        try:
            lens = metadata.seq_lens_k[:bs]
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, forward_batch.req_pool_indices[:bs], lens
            )
        except (RuntimeError, TypeError):
            logger.warning_once("DCP page table refresh failed; using batch lens")
            lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, lens, layer, bs)

    # expect: SG203
    def decode_dcp_kwargs(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        launch_kwargs = build_mla_launch_kwargs(
            self,
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=whole_kv_lens(forward_batch),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=get_parallel().dcp_enabled,
        )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)

    # expect: clean
    def decode_dcp_kwargs_localized(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        launch_kwargs = build_mla_launch_kwargs(
            self,
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=whole_kv_lens(forward_batch),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=get_parallel().dcp_enabled,
        )
        launch_kwargs["seq_lens"] = rank_local_kv_lens(launch_kwargs["seq_lens"])
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)

    # expect: SG203
    def decode_dcp_bound_launcher(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        launch = make_mla_decode_launcher(self)
        metadata = self._metadata_for(forward_batch)
        return launch(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=whole_kv_lens(forward_batch),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )

    # expect: clean
    def decode_dcp_bound_launcher_local(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        launch = make_mla_decode_launcher(self)
        metadata = self._metadata_for(forward_batch)
        lens = DcpLens.from_global(whole_kv_lens(forward_batch))
        return launch(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )

    # expect: SG203
    def decode_dcp_chunked(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        chunk: int = 256,
    ):
        """Very large decode batches: launch per row chunk to bound workspace."""
        metadata = self._metadata_for(forward_batch)
        kv_cache = self._paged_kv(layer)
        outs, lses = [], []
        for rows, lens in iter_decode_lens(forward_batch, chunk):
            out, lse = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)

    # expect: clean
    def decode_dcp_chunked_local(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        chunk: int = 256,
    ):
        metadata = self._metadata_for(forward_batch)
        kv_cache = self._paged_kv(layer)
        outs, lses = [], []
        for rows, lens in iter_local_decode_lens(forward_batch, chunk):
            out, lse = self._run_decode_kernel(
                query=query[rows],
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices[rows],
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)

    # expect: clean
    def decode_maybe_dcp(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        """Plain decode when this rank is not part of a DCP group."""
        metadata = self._metadata_for(forward_batch)
        if get_dcp_world_size() == 1:
            return self._run_decode_kernel(
                query=query,
                kv_cache=self._paged_kv(layer),
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens.to(torch.int32),
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
        bs = forward_batch.batch_size
        local = get_dcp_lens(
            forward_batch.seq_lens[:bs], get_dcp_world_size(), get_dcp_rank()
        ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, local, layer, bs)

    # expect: clean
    def decode_dcp_from_server_args(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        dcp_size = get_server_args().dcp_size
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens[:bs]
        if dcp_size > 1:
            lens = get_dcp_lens(lens, dcp_size, get_parallel().dcp_rank)
        lens = lens.to(torch.int32)
        out = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=dcp_size > 1,
        )
        if dcp_size > 1:
            raw_out, lse = out
            return self._merge_ready(raw_out, lse, lens, layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def replay_and_decode(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
    ):
        """CUDA-graph replay body: refresh the static length buffers, rebuild
        this rank's page table, and decode with the rank-local buffer."""
        metadata = self.decode_cuda_graph_metadata[bs]
        metadata.global_seq_lens_k.copy_(seq_lens[:bs])
        metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens[:bs]))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, metadata.seq_lens_k, layer, bs)

    # ------------------------------------------------------------------
    # multi-token (target verify / draft extend) under DCP
    # ------------------------------------------------------------------

    # expect: SG203
    def verify_dcp_direct(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        if get_parallel().dcp_enabled:
            raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=q,
                kv_cache=self._paged_kv(layer),
                workspace_buffer=self.workspace_buffer,
                qk_nope_head_dim=self.qk_nope_head_dim,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
                block_tables=metadata.block_kv_indices,
                seq_lens=metadata.seq_lens_k,
                max_seq_len=metadata.max_seq_len_k,
                bmm1_scale=self._compute_decode_bmm1_scale(layer),
                multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
                return_lse=True,
            )
            return self._merge_ready(raw_out, lse, metadata.seq_lens_k, layer, bs)
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k + draft_token_num,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def verify_dcp_refused(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "fork trtllm_mla verify has no global causal bound under DCP; "
                "use --attention-backend cutedsl_mla"
            )
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=self._paged_kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=whole_kv_lens(forward_batch, draft_token_num),
            max_seq_len=metadata.max_seq_len_k + draft_token_num,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: clean
    def verify_dcp_chain_rows(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        """Chain (topk=1) verify under DCP as single-token rows.

        Each (request, draft position) becomes its own one-token decode row
        whose rank-local length is that position's causal frontier, so no
        per-query global bound is needed.
        """
        parallel = get_parallel()
        metadata = self._metadata_for(forward_batch)
        bs = forward_batch.batch_size
        n = forward_batch.spec_info.draft_token_num
        if not parallel.dcp_enabled:
            return self.verify_dcp_refused(q, layer, forward_batch)
        row_lens = get_dcp_chain_spec_lens(
            metadata.global_seq_lens_k[:bs], n, parallel.dcp_size, parallel.dcp_rank
        )
        rows_q = q.view(bs * n, 1, layer.tp_q_head_num, layer.head_dim)
        rows_tables = metadata.block_kv_indices[:bs].repeat_interleave(n, dim=0)
        raw_out, lse = self._run_decode_kernel(
            query=rows_q,
            kv_cache=self._paged_kv(layer),
            block_tables=rows_tables,
            seq_lens=row_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, row_lens, self.q_indptr_decode[: bs * n + 1], 1
        )
        return output.flatten(1), lse


class StepCachedTRTLLMMLABackend(TRTLLMMLABackend):
    """Caches both length views once per step in ``init_forward_metadata``."""

    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            bs = forward_batch.batch_size
            self._step_global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            self._step_local_lens = self._get_dcp_local_seq_lens(
                self._step_global_lens
            )

    # expect: SG203
    def decode_with_step_cache(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def decode_with_step_local_cache(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return raw_out, lse


class FusedTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla whose decode kernel hook calls flashinfer directly.

    The fork drops the upstream guard from the hook (it costs a host check per
    layer); callers are responsible for only reaching it with supported
    shapes.
    """

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
        extra = {}
        if causal_seqs is not None:
            extra = dict(
                backend="cute-dsl",
                enable_dcp=True,
                cp_world=cp_world,
                cp_rank=cp_rank,
                causal_seqlens_kv_global=causal_seqs.to(torch.int32),
            )
        else:
            extra["multi_ctas_kv_counter_buffer"] = self._multi_ctas_kv_counter_buffer
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
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            **extra,
        )

    def _kv(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    # expect: clean
    def decode_dcp_single_token(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        local = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return self._run_decode_kernel(
            query=query,
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # expect: SG203
    def draft_extend_dcp(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        tokens_per_req = q.shape[0] // bs
        q = q.view(bs, tokens_per_req, layer.tp_q_head_num, layer.head_dim)
        dcp = get_parallel().dcp_enabled
        seq_lens = (
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            if dcp
            else metadata.seq_lens_k
        )
        return self._run_decode_kernel(
            query=q,
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            layer=layer,
            return_lse=dcp,
        )

    # expect: SG203
    def verify_dcp_kwargs(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        kernel_kwargs = {
            "query": q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
            "kv_cache": self._kv(layer),
            "block_tables": metadata.block_kv_indices,
            "seq_lens": metadata.seq_lens_k,
            "max_seq_len": metadata.max_seq_len_k,
            "layer": layer,
        }
        if parallel.dcp_enabled:
            kernel_kwargs.update(
                cp_world=parallel.dcp_size, cp_rank=parallel.dcp_rank, return_lse=True
            )
        return self._run_decode_kernel(**kernel_kwargs)

    # expect: clean
    def verify_dcp_kwargs_causal(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        kernel_kwargs = {
            "query": q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
            "kv_cache": self._kv(layer),
            "block_tables": metadata.block_kv_indices,
            "seq_lens": metadata.seq_lens_k,
            "max_seq_len": metadata.max_seq_len_k,
            "layer": layer,
        }
        if parallel.dcp_enabled:
            kernel_kwargs.update(
                causal_seqs=metadata.global_seq_lens_k,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
        return self._run_decode_kernel(**kernel_kwargs)


class ForkCuteDslMLABackend(CuteDslMLABackend):
    """cutedsl_mla with fork-local verify / decode entry points."""

    def _kv(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    # expect: SG203
    def decode_dcp_swapped(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        local_seq_lens = metadata.seq_lens_k[:bs]
        return self._run_decode_kernel(
            query=query,
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=local_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: clean
    def decode_dcp_ordered(
        self,
        query: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        local_seq_lens = metadata.seq_lens_k[:bs]
        return self._run_decode_kernel(
            query=query,
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # expect: clean
    def verify_dcp_causal(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        q = q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        if not parallel.dcp_enabled:
            return super().forward_extend(q, None, None, layer, forward_batch, False)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=self._kv(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=metadata.global_seq_lens_k.to(torch.int32),
            return_lse=True,
        )
        return raw_out, lse

    # expect: clean
    def verify_dcp_via_hook_without_bound(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        """Routes through the cute-dsl hook, which raises when a DCP launch
        (cp_world > 1) comes without ``causal_seqs``."""
        parallel = get_parallel()
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        return self._run_decode_kernel(
            query=q.view(bs, ndt, layer.tp_q_head_num, layer.head_dim),
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            cp_world=parallel.dcp_size if parallel.dcp_enabled else 1,
            cp_rank=parallel.dcp_rank if parallel.dcp_enabled else 0,
            return_lse=parallel.dcp_enabled,
        )
