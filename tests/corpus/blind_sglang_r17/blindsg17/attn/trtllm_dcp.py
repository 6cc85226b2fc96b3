"""trtllm-gen MLA backends with decode context parallel (DCP) fast paths.

Query preparation is reduced to the bf16 path (no fp8 KV), which is what the
fork deploys for DCP; everything else defers to ``TRTLLMMLABackend``.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Tuple

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph import (
    is_in_breakable_cuda_graph,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention

logger = logging.getLogger(__name__)


class _Bf16QueryMixin:
    """bf16 MLA query prep + KV save shared by the DCP backends below."""

    def _prepare_decode_query(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool,
        q_rope: Optional[torch.Tensor],
        k_rope: Optional[torch.Tensor],
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = concat_mla_absorb_q_general(q_nope, q_rope)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    def _decode_metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        batch_size = getattr(metadata, "batch_size", None)
        if batch_size is not None and batch_size < forward_batch.batch_size:
            self.init_forward_metadata(forward_batch)
            metadata = forward_batch.decode_trtllm_mla_metadata
        return metadata

    def _merge_ready(self, raw_out, lse, local_seq_lens, layer, bs, q_len=1):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            local_seq_lens,
            self.q_indptr_decode[: bs + 1] * q_len,
            q_len,
        )
        return output.flatten(1), lse


class DcpTRTLLMMLABackendV2(_Bf16QueryMixin, TRTLLMMLABackend):
    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not get_parallel().dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else forward_batch.seq_lens[:bs].to(torch.int32)
        )
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

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        parallel = get_parallel()
        if not (forward_batch.forward_mode.is_target_verify() and parallel.dcp_enabled):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = query.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return self._merge_ready(
            raw_out, lse, metadata.seq_lens_k, layer, bs, q_len=draft_token_num
        )

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
        if get_parallel().dcp_enabled and not return_lse:
            raise NotImplementedError(
                "DCP decode must return the rank-local lse for the merge"
            )
        extra_kwargs = {"backend": self.backend} if self.backend != "trtllm-gen" else {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = (
                self._multi_ctas_kv_counter_buffer
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
            return_lse=return_lse,
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            **extra_kwargs,
        )


class DcpTRTLLMMLABackend(_Bf16QueryMixin, TRTLLMMLABackend):
    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not get_parallel().dcp_enabled or self.data_type == torch.float8_e4m3fn:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        )
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
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        mode = forward_batch.forward_mode
        if get_parallel().dcp_enabled and (
            mode.is_target_verify() or mode.is_draft_extend_v2()
        ):
            raise NotImplementedError(
                "trtllm_mla cannot pass a global causal bound to its decode "
                "kernel; use cutedsl_mla for speculative decoding with DCP"
            )
        return super().forward_extend(
            q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
            cos_sin_cache, is_neox, llama_4_scaling,
        )

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
        if get_parallel().dcp_enabled and (
            q_len > 1 or causal_seqs is not None or not return_lse
        ):
            raise NotImplementedError(
                "DCP with q_len > 1 needs the cute-dsl kernel's global causal bound"
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
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class HoistedLensTRTLLMMLABackend(_Bf16QueryMixin, TRTLLMMLABackend):
    """Converts the per-step KV lengths once in ``init_forward_metadata``."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._step_kv_lens = forward_batch.seq_lens.to(torch.int32)
            self._step_bs = forward_batch.batch_size

    # expect: SG203
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = self._step_bs
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, self._step_kv_lens[:bs], layer, bs)


class StepLensTRTLLMMLABackend(_Bf16QueryMixin, TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            parallel = get_parallel()
            self._step_kv_lens = get_dcp_lens(
                forward_batch.seq_lens, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
            self._step_bs = forward_batch.batch_size

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._prepare_decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = self._step_bs
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, self._step_kv_lens[:bs], layer, bs)


class GraphAwareDcpTRTLLMMLABackend(_Bf16QueryMixin, TRTLLMMLABackend):
    # expect: SG203
    def decode_dcp_v2(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        assert get_parallel().dcp_enabled
        bs = forward_batch.batch_size
        graph_metadata = self.decode_cuda_graph_metadata.get(bs)
        if is_in_breakable_cuda_graph() and graph_metadata is not None:
            # Replay-stable buffers refreshed by _apply_dcp_cuda_graph_metadata.
            seq_lens = graph_metadata.seq_lens_k[:bs]
            block_tables = graph_metadata.block_kv_indices
            max_seq_len = graph_metadata.max_seq_len_k
        else:
            metadata = self._decode_metadata(forward_batch)
            seq_lens = forward_batch.seq_lens[:bs]
            block_tables = metadata.block_kv_indices
            max_seq_len = metadata.max_seq_len_k
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, seq_lens, layer, bs)

    # expect: clean
    def decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        assert get_parallel().dcp_enabled
        bs = forward_batch.batch_size
        graph_metadata = self.decode_cuda_graph_metadata.get(bs)
        if is_in_breakable_cuda_graph() and graph_metadata is not None:
            seq_lens = graph_metadata.seq_lens_k[:bs]
            block_tables = graph_metadata.block_kv_indices
            max_seq_len = graph_metadata.max_seq_len_k
        else:
            metadata = self._decode_metadata(forward_batch)
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
            block_tables = metadata.block_kv_indices
            max_seq_len = metadata.max_seq_len_k
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=block_tables,
            seq_lens=seq_lens,
            max_seq_len=max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return self._merge_ready(raw_out, lse, seq_lens, layer, bs)


class LayerwiseDcpTRTLLMMLABackend(_Bf16QueryMixin, TRTLLMMLABackend):
    """Batched per-layer decode for the fused MLA decoder block."""

    # expect: SG203
    def iter_layer_decode_v2(
        self,
        queries: Sequence[torch.Tensor],
        layers: Sequence["RadixAttention"],
        forward_batch: ForwardBatch,
    ) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        assert get_parallel().dcp_enabled
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        for query, layer in zip(queries, layers):
            k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
            kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            yield self._merge_ready(raw_out, lse, kv_lens, layer, bs)

    # expect: clean
    def iter_layer_decode(
        self,
        queries: Sequence[torch.Tensor],
        layers: Sequence["RadixAttention"],
        forward_batch: ForwardBatch,
    ) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        assert get_parallel().dcp_enabled
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        for query, layer in zip(queries, layers):
            k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
            kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=kv_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            yield self._merge_ready(raw_out, lse, kv_lens, layer, bs)

    # expect: SG203
    def decode_layers_partial(
        self,
        queries: List[torch.Tensor],
        layers: List["RadixAttention"],
        forward_batch: ForwardBatch,
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        run = functools.partial(
            self._run_decode_kernel,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            return_lse=get_parallel().dcp_enabled,
        )
        if get_parallel().dcp_enabled and metadata.global_seq_lens_k is not None:
            run = functools.partial(run, seq_lens=metadata.global_seq_lens_k[:bs])
        else:
            run = functools.partial(run, seq_lens=metadata.seq_lens_k[:bs])
        outs = []
        for query, layer in zip(queries, layers):
            k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
            kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
            outs.append(run(query=query, kv_cache=kv_cache, layer=layer))
        return outs

    # expect: clean
    def decode_layers_bound(
        self,
        queries: List[torch.Tensor],
        layers: List["RadixAttention"],
        forward_batch: ForwardBatch,
    ) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        run = functools.partial(
            self._run_decode_kernel,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            return_lse=get_parallel().dcp_enabled,
            seq_lens=metadata.seq_lens_k[:bs],
        )
        outs = []
        for query, layer in zip(queries, layers):
            k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
            kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
            outs.append(run(query=query, kv_cache=kv_cache, layer=layer))
        return outs

    # expect: SG203
    def draft_extend_ragged(
        self,
        q: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ) -> torch.Tensor:
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        parallel = get_parallel()
        max_q = max(forward_batch.extend_seq_lens_cpu)
        cu_seqlens_q = torch.nn.functional.pad(
            torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
            (1, 0),
        )
        kv_lens = metadata.seq_lens_k[:bs]
        if parallel.dcp_enabled:
            max_seq_len = metadata.max_seq_len_k + max_q // parallel.dcp_size + 1
        else:
            max_seq_len = metadata.max_seq_len_k + max_q
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cum_seq_lens_q=cu_seqlens_q,
            max_q_len=max_q,
            return_lse=parallel.dcp_enabled,
        )
        return out
