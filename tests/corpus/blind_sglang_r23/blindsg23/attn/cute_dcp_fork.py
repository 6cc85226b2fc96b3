"""cute-dsl MLA (in-kernel DCP) variants.

The cute-dsl decode kernel takes this rank's lengths in ``seq_lens`` and the
whole-sequence lengths in ``causal_seqlens_kv_global``; upstream reaches it
through ``CuteDslMLABackend._run_decode_kernel``.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer


class ForkCuteDcpBase(CuteDslMLABackend):
    """bf16-only DCP prep shared by the fork's cute-dsl overrides."""

    def _prep_query(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        if save_kv_cache:
            assert k is not None and k_rope is not None
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        if q_rope is None:
            return q.view(-1, layer.tp_q_head_num, layer.head_dim)
        return concat_mla_absorb_q_general(
            q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
        )

    def _kv(self, layer):
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _meta(self, forward_batch: ForwardBatch):
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _fork_path(self, forward_batch: ForwardBatch, llama_4_scaling) -> bool:
        return (
            get_parallel().dcp_enabled
            and self.data_type == torch.bfloat16
            and llama_4_scaling is None
            and forward_batch.forward_mode.is_decode_or_idle()
        )

    def _neutralize(self, raw_out, lse, local_lens, layer, bs, per_req=1):
        out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        q_indptr = torch.arange(
            0, (bs + 1) * per_req, per_req, dtype=torch.int32, device=out.device
        )
        fixup_zero_kv_rows(out, lse, local_lens, q_indptr, per_req)
        return out.flatten(1), lse


class CuteGlobalLensBackend(ForkCuteDcpBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
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
        if not self._fork_path(forward_batch, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        parallel = get_parallel()
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self._meta(forward_batch)
        bs = forward_batch.batch_size
        # Eager batches: take the lengths straight off the batch; the kernel
        # gets the DCP geometry through cp_world / cp_rank.
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=kv_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._neutralize(raw_out, lse, kv_lens, layer, bs)


class CuteLocalLensBackend(ForkCuteDcpBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (local seq_lens + global causal_seqs)
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
        if not self._fork_path(forward_batch, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        parallel = get_parallel()
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self._meta(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._neutralize(raw_out, lse, local_lens, layer, bs)


class CuteSwappedArgsBackend(ForkCuteDcpBase):
    # idiom: layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (seq_lens / causal_seqs contract)
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
        if not self._fork_path(forward_batch, llama_4_scaling):
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        parallel = get_parallel()
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).unsqueeze(1)
        metadata = self._meta(forward_batch)
        bs = forward_batch.batch_size
        global_lens = metadata.global_seq_lens_k[:bs]
        local_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query,
            self._kv(layer),
            metadata.block_kv_indices,
            global_lens,
            metadata.max_seq_len_k,
            layer,
            causal_seqs=local_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._neutralize(raw_out, lse, local_lens, layer, bs)


class CuteVerifyBackendSafe(ForkCuteDcpBase):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target verify with causal_seqs) + cutedsl kernel
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
        parallel = get_parallel()
        if (
            not forward_batch.forward_mode.is_target_verify()
            or not parallel.dcp_enabled
            or self.data_type != torch.bfloat16
            or llama_4_scaling is not None
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = self._prep_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        ).view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        metadata = self._meta(forward_batch)
        # Verify metadata: global_seq_lens_k = seq_lens + draft_token_num,
        # seq_lens_k = this rank's share of it.
        global_lens = metadata.global_seq_lens_k[:bs].to(torch.int32)
        local_lens = metadata.seq_lens_k[:bs].to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._kv(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )
        return self._neutralize(raw_out, lse, local_lens, layer, bs, draft_token_num)
