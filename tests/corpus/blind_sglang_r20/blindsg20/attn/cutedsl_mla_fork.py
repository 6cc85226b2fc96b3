"""Fork variants of ``CuteDslMLABackend`` (flashinfer cute-dsl MLA with DCP).

The cute-dsl kernel takes this rank's cyclic-local KV lengths in ``seq_lens``
and the whole-sequence lengths in ``causal_seqlens_kv_global``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Optional

import torch

from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg20.attn._mla_base import ForkMLAPlumbingMixin
from blindsg20.common.dcp import host_lens_to_device
from blindsg20.common.flags import ForkSpecFlags, dcp_world_from_server_args

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


class PositionalCuteDslMLABackend(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """bf16 DCP decode calling the kernel hook positionally."""

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if (
            not parallel.dcp_enabled
            or get_in_autotune_dummy_run()
            or not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._fork_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = metadata.global_seq_lens_k[:bs]
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query,
            self._fork_kv_cache(layer),
            metadata.block_kv_indices,
            global_lens,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=local_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, local_lens, layer, bs)


class PositionalLocalCuteDslMLABackend(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """PositionalCuteDslMLABackend with the hook's argument order."""

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if (
            not parallel.dcp_enabled
            or get_in_autotune_dummy_run()
            or not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._fork_decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = metadata.global_seq_lens_k[:bs]
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query,
            self._fork_kv_cache(layer),
            metadata.block_kv_indices,
            local_lens,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, local_lens, layer, bs)


class PartialLaunchCuteDslMLABackend(CuteDslMLABackend):
    """Binds the static kernel arguments once at construction."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._dcp_decode = partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
            enable_dcp=True,
            return_lse=True,
        )

    # expect: SG203
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
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
        # The kernel clamps every row by its causal bound, so the bound doubles
        # as the walk length; one int32 tensor serves both arguments.
        bound = (causal_seqs if causal_seqs is not None else seq_lens).to(torch.int32)
        return self._dcp_decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=bound,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=bound,
        )


class PartialLaunchLocalCuteDslMLABackend(CuteDslMLABackend):
    """PartialLaunchCuteDslMLABackend keeping the two length views apart."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._dcp_decode = partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            backend="cute-dsl",
            enable_dcp=True,
            return_lse=True,
        )

    # expect: clean
    def _run_decode_kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: RadixAttention,
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
        if causal_seqs is None:
            raise ValueError("DCP MLA decode needs the global per-request KV lengths")
        return self._dcp_decode(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=causal_seqs.to(torch.int32),
        )


class _ChunkedDcpDecodeBase(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """Splits wide DCP decodes so the cute-dsl workspace stays bounded."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._max_rows = ForkSpecFlags.from_server_args(
            model_runner.server_args
        ).max_rows_per_dcp_launch

    def forward_decode(
        self,
        q, k, v, layer, forward_batch,
        save_kv_cache=True, q_rope=None, k_rope=None,
        cos_sin_cache=None, is_neox=False, llama_4_scaling=None,
    ):
        if (
            not get_parallel().dcp_enabled
            or self._max_rows <= 0
            or forward_batch.batch_size <= self._max_rows
            or get_in_autotune_dummy_run()
            or not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._fork_decode_metadata(forward_batch)
        return self._launch_chunked(
            query,
            self._fork_kv_cache(layer),
            metadata,
            layer,
            forward_batch.batch_size,
        )


class ChunkedDcpCuteDslMLABackend(_ChunkedDcpDecodeBase):
    # expect: SG203
    def _launch_chunked(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        bs: int,
    ):
        parallel = get_parallel()
        outs, lses = [], []
        for start in range(0, bs, self._max_rows):
            end = min(start + self._max_rows, bs)
            rows = metadata.global_seq_lens_k[start:end]
            out, lse = self._run_decode_kernel(
                query[start:end],
                kv_cache,
                metadata.block_kv_indices[start:end],
                rows,
                metadata.max_seq_len_k,
                layer,
                causal_seqs=rows,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return self._fork_finish_dcp(
            torch.cat(outs), torch.cat(lses), metadata.seq_lens_k[:bs], layer, bs
        )


class ChunkedDcpLocalCuteDslMLABackend(_ChunkedDcpDecodeBase):
    # expect: clean
    def _launch_chunked(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        bs: int,
    ):
        parallel = get_parallel()
        outs, lses = [], []
        for start in range(0, bs, self._max_rows):
            end = min(start + self._max_rows, bs)
            out, lse = self._run_decode_kernel(
                query[start:end],
                kv_cache,
                metadata.block_kv_indices[start:end],
                metadata.seq_lens_k[start:end],
                metadata.max_seq_len_k,
                layer,
                causal_seqs=metadata.global_seq_lens_k[start:end],
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            outs.append(out)
            lses.append(lse)
        return self._fork_finish_dcp(
            torch.cat(outs), torch.cat(lses), metadata.seq_lens_k[:bs], layer, bs
        )


class VerifyMetaCuteDslMLABackend(CuteDslMLABackend):
    """Builds target-verify metadata without the generic decode-family branch."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = self.num_draft_tokens
        kv_lens = (forward_batch.seq_lens + ndt).to(torch.int32)
        if getattr(forward_batch, "seq_lens_cpu", None) is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max().item()) + ndt
        else:
            max_seq = self.max_context_len + ndt
        metadata = TRTLLMMLADecodeMetadata()
        metadata.global_seq_lens_k = kv_lens
        metadata.seq_lens_k = kv_lens
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            kv_lens,
            kv_lens.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_prefill_metadata = None
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata


class VerifyMetaLocalCuteDslMLABackend(CuteDslMLABackend):
    """VerifyMetaCuteDslMLABackend storing both DCP views."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        if not (
            forward_batch.forward_mode.is_target_verify()
            and get_parallel().dcp_enabled
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = self.num_draft_tokens
        kv_lens = (forward_batch.seq_lens + ndt).to(torch.int32)
        if getattr(forward_batch, "seq_lens_cpu", None) is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max().item()) + ndt
        else:
            max_seq = self.max_context_len + ndt
        metadata = TRTLLMMLADecodeMetadata()
        metadata.global_seq_lens_k = kv_lens
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(kv_lens)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            kv_lens,
            kv_lens.device,
        )
        metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_prefill_metadata = None
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata


class HostLensCuteDslMLABackend(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """Derives the kernel bound from the host mirror (no device max())."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._dcp_world = dcp_world_from_server_args(model_runner.server_args)

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        host_lens = getattr(forward_batch, "seq_lens_cpu", None)
        if (
            self._dcp_world <= 1
            or host_lens is None
            or get_in_autotune_dummy_run()
            or not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._fork_decode_metadata(forward_batch)
        host_lens = host_lens[:bs]
        kv_lens = host_lens_to_device(host_lens, query.device)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._fork_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(int(host_lens.max())),
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=self._dcp_world,
            cp_rank=get_parallel().dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class HostLocalLensCuteDslMLABackend(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """HostLensCuteDslMLABackend localising the host lengths first."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._dcp_world = dcp_world_from_server_args(model_runner.server_args)

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        host_lens = getattr(forward_batch, "seq_lens_cpu", None)
        if (
            self._dcp_world <= 1
            or host_lens is None
            or get_in_autotune_dummy_run()
            or not self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
        ):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        rank = get_parallel().dcp_rank
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._fork_decode_metadata(forward_batch)
        host_lens = host_lens[:bs]
        host_local = get_dcp_lens(host_lens, self._dcp_world, rank)
        global_lens = host_lens_to_device(host_lens, query.device)
        local_lens = host_lens_to_device(host_local, query.device)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._fork_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=max(int(host_local.max()), 1),
            layer=layer,
            causal_seqs=global_lens,
            cp_world=self._dcp_world,
            cp_rank=rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(raw_out, lse, local_lens, layer, bs)


class LiveVerifyCuteDslMLABackend(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """Target verify under DCP from the live batch (graph buffers are bucket-wide)."""

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_target_verify()
            and parallel.dcp_enabled
            and self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
            and forward_batch.spec_info.ragged_verify_layout is None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=draft_token_num,
        )
        metadata = self._fork_decode_metadata(forward_batch)
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query.to(self.data_type),
            kv_cache=self._fork_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(
            raw_out, lse, self._get_dcp_local_seq_lens(kv_lens), layer, bs,
            draft_token_num,
        )


class LiveVerifyLocalCuteDslMLABackend(ForkMLAPlumbingMixin, CuteDslMLABackend):
    """LiveVerifyCuteDslMLABackend passing this rank's share as seq_lens."""

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (
            forward_batch.forward_mode.is_target_verify()
            and parallel.dcp_enabled
            and self._fork_takes_fast_path(cos_sin_cache, llama_4_scaling)
            and forward_batch.spec_info.ragged_verify_layout is None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache,
                q_rope, k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._fork_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            tokens_per_req=draft_token_num,
        )
        metadata = self._fork_decode_metadata(forward_batch)
        global_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query.to(self.data_type),
            kv_cache=self._fork_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._fork_finish_dcp(
            raw_out, lse, local_lens, layer, bs, draft_token_num
        )
