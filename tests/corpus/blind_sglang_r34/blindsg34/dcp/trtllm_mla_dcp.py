"""Vendor DCP port of SGLang's TRTLLM MLA backend (trtllm-gen decode kernel).

The trtllm-gen kernel has no in-kernel DCP (no ``causal_seqlens_kv_global``),
so the port serves single-token decode only and needs rank-local lengths and
the rank-local page table for every launch.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang.kernels.jit.utils import is_arch_support_pdl
from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg34.dcp.lens import (
    draft_extend_global_lens,
    local_max_seq_len,
    to_local,
    verify_global_lens,
)
from blindsg34.dcp.world import dcp_from_attn_parallel, dcp_from_parallel

if is_flashinfer_available():
    import flashinfer

_ENABLE_PDL = is_arch_support_pdl()


class VendorTRTLLMMLADcpBackend(TRTLLMMLABackend):
    """trtllm_mla with the vendor's DCP metadata path."""

    def _host_max_seq_len(self, forward_batch: ForwardBatch) -> int:
        if getattr(forward_batch, "seq_lens_cpu", None) is not None:
            return int(forward_batch.seq_lens_cpu.max().item())
        return self.max_context_len

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode-family branch + DCP hoist)
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if not (
            mode.is_decode_or_idle()
            or mode.is_target_verify()
            or mode.is_draft_extend_v2()
        ):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        dcp_size, dcp_rank = dcp_from_parallel()
        max_seq = self._host_max_seq_len(forward_batch)
        metadata = TRTLLMMLADecodeMetadata()
        if mode.is_target_verify():
            global_lens = verify_global_lens(forward_batch.seq_lens, self.num_draft_tokens)
            max_seq += self.num_draft_tokens
        elif mode.is_draft_extend_v2():
            global_lens = draft_extend_global_lens(forward_batch)
            metadata.max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.seq_lens_q = forward_batch.extend_seq_lens
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )
        else:
            global_lens = forward_batch.seq_lens.to(torch.int32)
        # _create_block_kv_indices builds the rank-local table under DCP.
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            global_lens,
            global_lens.device,
        )
        metadata.global_seq_lens_k = global_lens
        metadata.seq_lens_k = to_local(global_lens, dcp_size, dcp_rank)
        metadata.max_seq_len_k = local_max_seq_len(int(max_seq), dcp_size, dcp_rank)
        metadata.batch_size = bs
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
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
        fixup_zero_kv_rows(output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal)
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
        q_len = query.shape[1] if query.dim() == 4 else 1
        if get_parallel().attn_dcp_size > 1 and (q_len > 1 or causal_seqs is not None):
            raise NotImplementedError(
                "vendor trtllm_mla DCP serves single-token decode only: trtllm-gen "
                "takes no global causal bound; use cutedsl_mla for target verify / "
                "draft extend under DCP"
            )
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

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata_out_graph (build_inner_fb_view metadata)
    # expect: clean
    def build_decode_metadata_for_view(
        self, forward_batch: ForwardBatch
    ) -> TRTLLMMLADecodeMetadata:
        bs = forward_batch.batch_size
        dcp_size, dcp_rank = dcp_from_attn_parallel()
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = to_local(global_lens, dcp_size, dcp_rank)
        max_blocks = self._calc_padded_blocks(self.max_context_len)
        block_kv_indices = torch.full(
            (bs, max_blocks), -1, dtype=torch.int32, device=global_lens.device
        )
        self._fill_dcp_block_kv_indices(
            block_kv_indices, forward_batch.req_pool_indices[:bs], local_lens
        )
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=block_kv_indices,
            max_seq_len_k=self._get_dcp_local_max_seq_len(self.max_context_len),
            seq_lens_k=local_lens,
            global_seq_lens_k=global_lens,
        )
        metadata.batch_size = bs
        forward_batch.decode_trtllm_mla_metadata = metadata
        return metadata


class VendorTRTLLMMLADcpBackendNoHoist(VendorTRTLLMMLADcpBackend):
    """Skips the hoisted int32 lens (profiling build)."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        # Read the lengths straight off the batch: one less buffer to keep
        # in sync with graph replay.
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


class TRTLLMMLASpecDcpBackend(VendorTRTLLMMLADcpBackend):
    """Lets target verify / draft extend through trtllm-gen under DCP."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel (DCP refusal)
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
        # The rank-local page table already confines each row to this rank's
        # shard; trtllm-gen needs nothing else.
        bmm1_scale = self._compute_decode_bmm1_scale(layer)
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
            return_lse=return_lse or cp_world > 1,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )


class TRTLLMMLADcpDecodeOnlyBackend(TRTLLMMLABackend):
    """Vendor metadata path that hoists DCP lens only where they 'matter'."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode-family branch + DCP hoist)
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        mode = forward_batch.forward_mode
        if not (mode.is_decode_or_idle() or mode.is_target_verify()):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens
        if getattr(forward_batch, "seq_lens_cpu", None) is not None:
            max_seq = int(forward_batch.seq_lens_cpu.max().item())
        else:
            max_seq = self.max_context_len
        if mode.is_target_verify():
            global_lens = verify_global_lens(seq_lens, self.num_draft_tokens)
            max_seq += self.num_draft_tokens
            local_lens = self._get_dcp_local_seq_lens(global_lens)
        else:
            # Single query token: the rank-local page table already bounds
            # what this rank reads, so the whole length is fine here.
            global_lens = seq_lens.to(torch.int32)
            local_lens = global_lens
        block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            global_lens,
            global_lens.device,
        )
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=block_kv_indices,
            max_seq_len_k=self._get_dcp_local_max_seq_len(max_seq),
            seq_lens_k=local_lens,
            global_seq_lens_k=global_lens,
        )
        metadata.batch_size = bs
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata


class TRTLLMMLADcpViewBuilder(TRTLLMMLABackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata_out_graph (build_inner_fb_view metadata)
    # expect: SG203
    def build_decode_metadata_for_view(
        self, forward_batch: ForwardBatch
    ) -> TRTLLMMLADecodeMetadata:
        bs = forward_batch.batch_size
        dcp_size, dcp_rank = dcp_from_attn_parallel()
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = to_local(global_lens, dcp_size, dcp_rank)
        max_blocks = self._calc_padded_blocks(self.max_context_len)
        block_kv_indices = torch.full(
            (bs, max_blocks), -1, dtype=torch.int32, device=global_lens.device
        )
        self._fill_dcp_block_kv_indices(
            block_kv_indices, forward_batch.req_pool_indices[:bs], local_lens
        )
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=block_kv_indices,
            max_seq_len_k=self._get_dcp_local_max_seq_len(self.max_context_len),
            seq_lens_k=global_lens,
            global_seq_lens_k=global_lens,
        )
        metadata.batch_size = bs
        forward_batch.decode_trtllm_mla_metadata = metadata
        return metadata
