"""Fork-local TRT-LLM MLA backend variants (decode context parallel work)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.jit.utils import is_arch_support_pdl
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
from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)

_ENABLE_PDL = is_arch_support_pdl()


def _absorbed_query(q, q_rope, layer) -> torch.Tensor:
    if q_rope is None:
        return q.view(-1, layer.tp_q_head_num, layer.head_dim)
    q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
    return concat_mla_absorb_q_general(q_nope, q_rope)


class SpecTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla with the DCP speculative verify opened up: the rank-local
    LSE is merged across the DCP group by the model, as for plain decode."""

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
                "DCP decode must return the rank-local LSE for the cross-rank merge"
            )
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
        extra_kwargs = {}
        if self.backend == "trtllm-gen":
            extra_kwargs["multi_ctas_kv_counter_buffer"] = (
                self._multi_ctas_kv_counter_buffer
            )
        else:
            extra_kwargs["backend"] = self.backend
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            enable_pdl=_ENABLE_PDL,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=bmm1_scale,
            return_lse=return_lse,
            **extra_kwargs,
        )


class PdlToggleTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla with PDL switchable per process (debugging hangs)."""

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
                "trtllm-gen has no global causal bound; DCP speculative verify / "
                "draft-extend needs --attention-backend cutedsl_mla"
            )
        enable_pdl = _ENABLE_PDL and not envs.SGLANG_ENABLE_ASYNC_ASSERT.get()
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            enable_pdl=enable_pdl,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=(
                seq_lens if seq_lens.dtype == torch.int32 else seq_lens.to(torch.int32)
            ),
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class GlobalLenTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        # metadata.seq_lens_k is a capture-stable buffer shared with the
        # decode graphs; the eager path reads the live lengths instead.
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
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse


class RecomputeLocalTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        # Recompute from the live lengths instead of the capture-stable buffer.
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse


class SkipLocalizeTRTLLMMLABackend(TRTLLMMLABackend):
    """Decode metadata built in one pass (no kv-shard pool support)."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        if not forward_batch.forward_mode.is_decode_or_idle():
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        if forward_batch.seq_lens_cpu is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max().item())
        else:
            max_seq = self.max_context_len

        metadata = TRTLLMMLADecodeMetadata()
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        # Under DCP this already builds the page table over this rank's slice.
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = max_seq
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        metadata.batch_size = bs
        self.forward_prefill_metadata = None
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata


class StatsTRTLLMMLABackend(TRTLLMMLABackend):
    """Records the longest global KV length per step for the load report."""

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.max_global_kv_len = 0

    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        metadata = self.forward_decode_metadata
        if (
            forward_batch.forward_mode.is_decode()
            and metadata is not None
            and forward_batch.seq_lens_cpu is not None
        ):
            global_lens = (
                metadata.global_seq_lens_k
                if metadata.global_seq_lens_k is not None
                else forward_batch.seq_lens_cpu
            )
            self.max_global_kv_len = max(
                self.max_global_kv_len, int(forward_batch.seq_lens_cpu.max())
            )
            if envs.SGLANG_LOG_DECODE_GRAPH_KEY.get():
                logger.info(
                    "mla decode: bs=%d max_global_kv=%d (dcp_local=%s)",
                    forward_batch.batch_size,
                    self.max_global_kv_len,
                    global_lens is not metadata.seq_lens_k,
                )


class ServerArgsDCPTRTLLMMLABackend(TRTLLMMLABackend):
    """trtllm_mla that reads the DCP width from the server args (the
    runtime parallel context is not yet published when it is built)."""

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.dcp_size = get_server_args().dcp_size

    def _prepare_kv(self, layer, forward_batch, k, k_rope, save_kv_cache):
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if self.data_type == torch.float8_e4m3fn or llama_4_scaling is not None:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        kv_cache = self._prepare_kv(layer, forward_batch, k, k_rope, save_kv_cache)
        query = _absorbed_query(q, q_rope, layer).unsqueeze(1)
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs]
        if self.dcp_size > 1:
            dcp_rank = get_parallel().dcp_rank
            local_lens = get_dcp_lens(global_lens, self.dcp_size, dcp_rank).to(
                torch.int32
            )
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=local_lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            lse = lse.view(-1, layer.tp_q_head_num)
            fixup_zero_kv_rows(out, lse, local_lens, self.q_indptr_decode[: bs + 1], 1)
            return out.flatten(1), lse
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # expect: SG203
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not forward_batch.forward_mode.is_target_verify() or (
            self.data_type == torch.float8_e4m3fn
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        kv_cache = self._prepare_kv(layer, forward_batch, k, k_rope, save_kv_cache)
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = _absorbed_query(q, q_rope, layer).view(
            bs, draft_token_num, layer.tp_q_head_num, layer.head_dim
        )
        kv_lens = metadata.seq_lens_k[:bs]
        return_lse = False
        if self.dcp_size > 1:
            # seq_lens_k is already this rank's share under DCP; the model
            # merges the per-rank partial states with the LSE.
            return_lse = True
        result = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=return_lse,
            enable_pdl=_ENABLE_PDL,
        )
        if return_lse:
            raw_out, lse = result
            out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            return out.flatten(1), lse.view(-1, layer.tp_q_head_num)
        return result.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class RefusingDraftExtendTRTLLMMLABackend(TRTLLMMLABackend):
    """Runs draft-extend through a direct varlen launch (no query padding)."""

    # expect: clean
    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not forward_batch.forward_mode.is_draft_extend_v2():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "varlen draft-extend has no DCP causal bound; disable DCP for the "
                "draft model or use the padded path"
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        query = _absorbed_query(q, q_rope, layer).to(self.data_type)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k + metadata.max_seq_len_q,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            cum_seq_lens_q=metadata.cu_seqlens_q,
            max_q_len=metadata.max_seq_len_q,
            enable_pdl=_ENABLE_PDL,
        )
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
