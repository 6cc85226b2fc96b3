"""trtllm-gen MLA decode: the fork's TRTLLMMLABackend variants.

SGLang's ``TRTLLMMLABackend._run_decode_kernel`` serves a DCP decode only for
a single query token with ``return_lse=True``; it refuses every multi-token
(verify / draft-extend) DCP launch. Some of the fork's variants call the
flashinfer kernel directly.
"""

import logging
from typing import Optional

import torch

from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg24.attn.mla_common import MlaDecodeQueryMixin

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class ForkTRTLLMMLABackend(MlaDecodeQueryMixin, TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode -> _forward_decode_dcp
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        # Metadata may come from a graph captured at a larger bs: read the
        # live lengths from the batch instead.
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
        return self._finish_rank_local(raw_out, lse, seq_lens.to(torch.int32), layer, bs)


class ForkTRTLLMMLABackendLocal(MlaDecodeQueryMixin, TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (_get_dcp_local_seq_lens)
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
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (metadata.seq_lens_k, else _get_dcp_local_seq_lens)
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
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
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (non-DCP launch; DCP handed to the parent)
    # expect: clean
    def forward_decode_fast(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
    ):
        if get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend) via _run_decode_kernel, whose DCP q_len > 1 check raises
    # expect: clean
    def forward_draft_extend_dcp(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_seq = query.shape[0] // bs
        q = query.view(bs, tokens_per_seq, layer.tp_q_head_num, layer.head_dim)
        if get_parallel().dcp_enabled:
            local_seq_lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
        else:
            local_seq_lens = metadata.seq_lens_k[:bs]
        # Under DCP SGLang's helper raises NotImplementedError for q_len > 1.
        raw_out = self._run_decode_kernel(
            query=q,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k + tokens_per_seq,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DirectKernelTRTLLMMLABackend(MlaDecodeQueryMixin, TRTLLMMLABackend):
    """Skips ``_run_decode_kernel`` to pass our own workspace/PDL settings."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla)
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
        dcp = get_parallel().dcp_enabled
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            enable_pdl=False,
            # The cross-rank merge in forward_mla needs the rank-local LSE.
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class DirectKernelTRTLLMMLABackendChecked(MlaDecodeQueryMixin, TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel; sglang/srt/layers/dcp/layout.py get_dcp_lens
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
        query = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        if parallel.dcp_enabled:
            seq_lens = get_dcp_lens(seq_lens, parallel.dcp_size, parallel.dcp_rank)
        seq_lens = seq_lens.to(torch.int32)
        out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            enable_pdl=False,
            return_lse=parallel.dcp_enabled,
        )
        if parallel.dcp_enabled:
            raw_out, lse = out
            return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/flashmla_backend.py FlashMLABackend.forward_decode (assert dcp_world_size == 1 before a whole-sequence launch)
    # expect: clean
    def forward_decode_single_rank(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        assert not get_parallel().dcp_enabled, (
            "forward_decode_single_rank reads whole-sequence lengths; DCP unsupported"
        )
        metadata = self._decode_metadata(forward_batch)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp (rank-local lens also feed fixup_zero_kv_rows)
    # expect: SG203
    def forward_decode_dcp_direct(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            raise RuntimeError("DCP-only entry point")
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        local_seq_lens = get_dcp_lens(
            forward_batch.seq_lens[:bs], parallel.dcp_size, parallel.dcp_rank
        ).to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs].to(torch.int32),
            max_seq_len=self._get_dcp_local_max_seq_len(metadata.max_seq_len_k),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        # Zero-KV rows on this rank contribute a neutral state to the merge.
        return self._finish_rank_local(raw_out, lse, local_seq_lens, layer, bs)


class DraftRunnerTRTLLMMLABackend(MlaDecodeQueryMixin, TRTLLMMLABackend):
    """Per-step draft backend built with skip_prefill: it builds its own page
    table on the first layer of each step."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (_create_block_kv_indices is DCP-aware) + _run_decode_kernel
    # expect: SG203
    def forward_decode_own_table(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        max_seq = self.max_context_len
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        dcp = get_parallel().dcp_enabled
        out = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_rank_local(raw_out, lse, seq_lens, layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._create_block_kv_indices + _get_dcp_local_seq_lens
    # expect: clean
    def forward_decode_own_table_local(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        max_seq = self.max_context_len
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        dcp = get_parallel().dcp_enabled
        kernel_lens = self._get_dcp_local_seq_lens(seq_lens)
        out = self._run_decode_kernel(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            block_tables=block_kv_indices,
            seq_lens=kernel_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(max_seq),
            layer=layer,
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = out
            return self._finish_rank_local(raw_out, lse, kernel_lens, layer, bs)
        return out.view(-1, layer.tp_q_head_num * layer.v_head_dim)


class ForkTRTLLMVerifyBackend(MlaDecodeQueryMixin, TRTLLMMLABackend):
    """Target verify under DCP, bypassing the parent's refusal."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (target-verify DCP branch) with the q_len > 1 refusal removed
    # expect: SG203
    def dcp_verify(
        self,
        q: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        if parallel.dcp_enabled:
            kv_lens = self._get_dcp_local_seq_lens(
                forward_batch.seq_lens[:bs] + draft_token_num
            )
            # Local page table + local lengths: the rank-local view.
        else:
            kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=True,
        )
        return self._finish_rank_local(raw_out, lse, kv_lens, layer, bs, draft_token_num)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP q_len > 1 -> NotImplementedError)
    # expect: clean
    def dcp_verify_refused(
        self,
        q: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        if get_parallel().dcp_enabled:
            raise NotImplementedError(
                "trtllm-gen has no global causal bound for DCP target verify; "
                "use the cutedsl_mla backend"
            )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k + draft_token_num,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (enable_dcp, causal_seqlens_kv_global) called from a verify path
    # expect: SG203
    def dcp_verify_cute(
        self,
        q: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=global_kv_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k + draft_token_num
            ),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=parallel.dcp_enabled,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_kv_lens if parallel.dcp_enabled else None,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, global_kv_lens, layer, bs, draft_token_num
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (local seq_lens + causal_seqlens_kv_global) called from a verify path
    # expect: clean
    def dcp_verify_cute_local(
        self,
        q: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        parallel = get_parallel()
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        query = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        global_kv_lens = (forward_batch.seq_lens[:bs] + draft_token_num).to(torch.int32)
        local_kv_lens = self._get_dcp_local_seq_lens(global_kv_lens)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=self._paged_kv_cache(layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_kv_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k + draft_token_num
            ),
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=parallel.dcp_enabled,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_kv_lens if parallel.dcp_enabled else None,
            return_lse=True,
        )
        return self._finish_rank_local(
            raw_out, lse, local_kv_lens, layer, bs, draft_token_num
        )
