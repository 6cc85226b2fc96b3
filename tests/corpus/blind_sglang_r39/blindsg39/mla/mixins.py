"""DCP mixins for the fork's MLA backends.

``DcpSettingsMixin`` caches the DCP world from the server args the concrete
backend stores on ``self.server_args``; ``DcpDecodeKernelMixin`` holds the
kernel launches shared by the TRT-LLM / CuteDSL MLA forks.
"""

from __future__ import annotations

import logging
from functools import cached_property

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg39.mla.utils import split_dcp_lens

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class DcpSettingsMixin:
    @cached_property
    def dcp_size(self) -> int:
        return int(getattr(self.server_args, "dcp_size", 1) or 1)

    @cached_property
    def dcp_rank(self) -> int:
        return get_parallel().dcp_rank if self.dcp_size > 1 else 0

    def _local(self, seq_lens: torch.Tensor) -> torch.Tensor:
        if self.dcp_size <= 1:
            return seq_lens
        return get_dcp_lens(seq_lens, self.dcp_size, self.dcp_rank).to(torch.int32)

    def _local_max(self, max_seq_len: int) -> int:
        if self.dcp_size <= 1:
            return max_seq_len
        local = max_seq_len // self.dcp_size + int(
            self.dcp_rank < max_seq_len % self.dcp_size
        )
        return max(local, 1)


class DcpRefusalMixin:
    def _refuse_multi_token_dcp(self, q_len: int, what: str) -> None:
        if self.dcp_size > 1 and q_len > 1:
            raise NotImplementedError(
                f"{what}: the decode kernel takes no global causal bound, which "
                "DCP needs for q_len > 1; use cutedsl_mla for DCP speculative runs."
            )


class DcpDecodeKernelMixin:
    """trtllm-gen MLA decode launches shared by the fork's backends."""

    def _trtllm_gen_kwargs(self):
        return {"multi_ctas_kv_counter_buffer": self._multi_ctas_kv_counter_buffer}

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _launch_decode_from_batch_local(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = self._local(forward_batch.seq_lens[:bs]).to(torch.int32)
        dcp_on = self.dcp_size > 1
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._local_max(metadata.max_seq_len_k),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp_on,
            **self._trtllm_gen_kwargs(),
        )
        if not dcp_on:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _launch_decode_from_batch(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        dcp_on = self.dcp_size > 1
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._local_max(metadata.max_seq_len_k),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp_on,
            **self._trtllm_gen_kwargs(),
        )
        if not dcp_on:
            return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = out
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, self._local(seq_lens), self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify kernel call)
    # expect: SG203
    def _launch_verify_from_batch(self, q, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        seq_lens = self._local(forward_batch.seq_lens[:bs] + draft_token_num)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=self._local_max(metadata.max_seq_len_k + draft_token_num),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=self.dcp_size > 1,
            **self._trtllm_gen_kwargs(),
        )
        return raw_out

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal) + forward_extend
    # expect: clean
    def _launch_verify_from_batch_refusing(self, q, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        self._refuse_multi_token_dcp(draft_token_num, "target verify")
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        seq_lens = self._local(forward_batch.seq_lens[:bs] + draft_token_num)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=self._local_max(metadata.max_seq_len_k + draft_token_num),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=self.dcp_size > 1,
            **self._trtllm_gen_kwargs(),
        )
        return raw_out

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (local / global lens pair)
    # expect: clean
    def _launch_split_lens(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            causal_seqlens_kv_global=lens.global_lens,
            return_lse=True,
        )
        return raw_out, lse, lens.local

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (local / global lens pair)
    # expect: SG203
    def _launch_split_lens_swapped(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = split_dcp_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.global_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            causal_seqlens_kv_global=lens.local,
            return_lse=True,
        )
        return raw_out, lse, lens.local

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (kernel launch with a retry)
    # expect: clean
    def _launch_with_fallback(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local_lens = self._local(forward_batch.seq_lens[:bs]).to(torch.int32)
        launch = dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=self.dcp_size > 1,
        )
        try:
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                seq_lens=local_lens,
                **launch,
                **self._trtllm_gen_kwargs(),
            )
        except RuntimeError:
            logger.warning_once("trtllm-gen MLA decode failed; retrying on xqa.")
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                seq_lens=local_lens, backend="xqa", **launch
            )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (kernel launch with a retry)
    # expect: SG203
    def _launch_with_fallback_global(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local_lens = self._local(forward_batch.seq_lens[:bs]).to(torch.int32)
        launch = dict(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=self.dcp_size > 1,
        )
        try:
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                seq_lens=local_lens,
                **launch,
                **self._trtllm_gen_kwargs(),
            )
        except RuntimeError:
            logger.warning_once("trtllm-gen MLA decode failed; retrying on xqa.")
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
                backend="xqa",
                **launch,
            )
