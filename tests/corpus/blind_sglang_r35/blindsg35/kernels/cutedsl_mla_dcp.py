"""CuteDSL MLA (flashinfer ``backend="cute-dsl"``) under decode context
parallelism: rank-local ``seq_lens`` plus the global causal bound
``causal_seqlens_kv_global`` for multi-token queries."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel

from blindsg35.kernels._mla_common import DcpMetadataMixin, is_decode_family
from blindsg35.kernels.lens import verify_kv_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class CloudCuteDslMLABackend(DcpMetadataMixin, CuteDslMLABackend):
    """cute-dsl decode / verify / draft-extend with the cloud's DCP metadata."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: clean
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        if not is_decode_family(forward_batch):
            return super().init_forward_metadata(forward_batch)
        metadata = self._decode_family_metadata(forward_batch)
        # Rank-local view of every decode-family length; identity without DCP.
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    @staticmethod
    def _merge_query(q, q_rope, layer: "RadixAttention") -> torch.Tensor:
        if q_rope is None:
            return q.view(-1, layer.tp_q_head_num, layer.head_dim)
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_rope = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        return concat_mla_absorb_q_general(q_nope, q_rope)

    def _kv_cache(self, layer: "RadixAttention") -> torch.Tensor:
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        return paged_row_view(k_cache, self.page_size).unsqueeze(1)

    def _metadata(self, forward_batch: "ForwardBatch") -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
    # expect: SG203
    def _decode_dcp(
        self,
        query: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        global_seq_lens = metadata.global_seq_lens_k[:bs]
        local_seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=global_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=local_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

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
        if not get_parallel().dcp_enabled or self.data_type != torch.bfloat16:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        query = self._merge_query(q, q_rope, layer).unsqueeze(1)
        return self._decode_dcp(query, self._metadata(forward_batch), layer, forward_batch)

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
        mode = forward_batch.forward_mode
        if (
            not get_parallel().dcp_enabled
            or self.data_type != torch.bfloat16
            or not (mode.is_target_verify() or mode.is_draft_extend_v2())
        ):
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        bs = forward_batch.batch_size
        query = self._merge_query(q, q_rope, layer).view(
            bs, -1, layer.tp_q_head_num, layer.head_dim
        )
        return self._multi_token_dcp(query, self._metadata(forward_batch), layer, bs)

    def _multi_token_dcp(
        self,
        query: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        bs: int,
    ):
        parallel = get_parallel()
        q_len = query.shape[1]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * q_len, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * q_len, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output, lse, metadata.seq_lens_k, self._dense_q_indptr(bs, q_len), q_len
        )
        return output.flatten(1), lse

    # ------------------------------------------------------------------
    # Early target-verify metadata (built on the plan stream before the
    # draft finishes; the graph-less verify path reads it as-is).
    # ------------------------------------------------------------------
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (target verify)
    # expect: clean
    def build_verify_metadata_early(
        self, forward_batch: "ForwardBatch"
    ) -> TRTLLMMLADecodeMetadata:
        metadata = self._decode_family_metadata(forward_batch)
        global_lens = verify_kv_lens(forward_batch.seq_lens, self.num_draft_tokens)
        # Global first: it is the causal bound of the newest draft token.
        metadata.global_seq_lens_k = global_lens
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(global_lens)
        forward_batch.decode_trtllm_mla_metadata = metadata
        return metadata


class CloudCuteDslMTPBackend(CloudCuteDslMLABackend):
    """MTP serving line: same kernels, draft-extend tuned metadata."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: SG203
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        if not is_decode_family(forward_batch):
            return super().init_forward_metadata(forward_batch)
        metadata = self._decode_family_metadata(forward_batch)
        if forward_batch.forward_mode.is_draft_extend_v2():
            # Draft extend already carries the window-aligned lengths from
            # prepare_for_draft_extend; the cute-dsl kernel takes cp_rank and
            # slices its own share, so hand them over unchanged.
            metadata.seq_lens_k = metadata.global_seq_lens_k
        else:
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
    # expect: clean
    def _decode_dcp(
        self,
        query: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=self._kv_cache(layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=global_seq_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (target verify)
    # expect: SG203
    def build_verify_metadata_early(
        self, forward_batch: "ForwardBatch"
    ) -> TRTLLMMLADecodeMetadata:
        metadata = self._decode_family_metadata(forward_batch)
        metadata.seq_lens_k = self._get_dcp_local_seq_lens(
            verify_kv_lens(forward_batch.seq_lens, self.num_draft_tokens)
        )
        # Hoisted: one int32 tensor serves both kernel arguments.
        metadata.global_seq_lens_k = metadata.seq_lens_k
        forward_batch.decode_trtllm_mla_metadata = metadata
        return metadata
