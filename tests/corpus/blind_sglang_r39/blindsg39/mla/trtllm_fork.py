"""TRT-LLM MLA and CuteDSL MLA backends of the fork.

Derived from ``sglang/srt/layers/attention/trtllm_mla_backend.py`` and
``sglang/srt/layers/attention/cutedsl_mla_backend.py`` (SGLang 0.5.18 /
0.5.23), with the DCP plumbing moved into :mod:`blindsg39.mla.mixins`.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.environ import envs
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.layers.logits_processor import get_in_autotune_dummy_run
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg39.mla.mixins import (
    DcpDecodeKernelMixin,
    DcpRefusalMixin,
    DcpSettingsMixin,
)
from blindsg39.mla.utils import decode_args_from_batch, decode_args_from_metadata

if is_flashinfer_available():
    import flashinfer

logger = logging.getLogger(__name__)


class ForkTRTLLMMLABackend(
    DcpSettingsMixin, DcpRefusalMixin, DcpDecodeKernelMixin, TRTLLMMLABackend
):
    def __init__(
        self,
        model_runner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
        backend: str = "trtllm-gen",
    ):
        super().__init__(
            model_runner,
            skip_prefill,
            kv_indptr_buf,
            q_indptr_decode_buf,
            backend=backend,
        )
        self.server_args = model_runner.server_args
        self.dcp_size_cfg = int(self.server_args.dcp_size)
        self.attn_cp_size_cfg = int(self.server_args.attn_cp_size)
        parallel = get_parallel()
        self._local_lens_fn = partial(
            get_dcp_lens, dcp_size=parallel.dcp_size, dcp_rank=parallel.dcp_rank
        )

    def _decode_family(self, forward_mode: ForwardMode) -> bool:
        return (
            forward_mode.is_decode_or_idle()
            or forward_mode.is_target_verify()
            or forward_mode.is_draft_extend_v2()
        )

    def _host_max_seq(self, forward_batch: ForwardBatch) -> int:
        if getattr(forward_batch, "seq_lens_cpu", None) is not None:
            return int(forward_batch.seq_lens_cpu.max().item())
        return self.max_context_len

    def _publish(self, forward_batch: ForwardBatch, metadata) -> None:
        self.forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = metadata

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        forward_mode = forward_batch.forward_mode
        if not self._decode_family(forward_mode):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        metadata = TRTLLMMLADecodeMetadata()
        if forward_mode.is_target_verify() or forward_mode.is_draft_extend_v2():
            self.forward_prefill_metadata = None
        max_seq = self._host_max_seq(forward_batch)
        seq_lens = forward_batch.seq_lens
        if forward_mode.is_target_verify():
            max_seq = max_seq + self.num_draft_tokens
            seq_lens = seq_lens + self.num_draft_tokens
        elif forward_mode.is_draft_extend_v2():
            max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            metadata.max_seq_len_q = max_seq_len_q
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )
            metadata.seq_lens_q = forward_batch.extend_seq_lens
            seq_lens = seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = int(max_seq)
        metadata.batch_size = bs
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.seq_lens_k = self._get_dcp_local_seq_lens(
                metadata.global_seq_lens_k
            )
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k
            )
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self, bs, req_pool_indices, seq_lens, forward_mode, metadata
    ):
        if forward_mode.is_target_verify():
            torch.add(
                seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k
            )
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices, req_pool_indices[:bs], metadata.seq_lens_k
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
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
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP width from server args)
    # expect: clean
    def _init_decode_metadata_ctor_gated(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        max_seq = self._host_max_seq(forward_batch)
        seq_lens = forward_batch.seq_lens
        metadata = TRTLLMMLADecodeMetadata()
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        if self.dcp_size_cfg > 1:
            metadata.global_seq_lens_k = seq_lens.to(torch.int32)
            metadata.seq_lens_k = get_dcp_lens(
                seq_lens, self.dcp_size_cfg, get_parallel().dcp_rank
            ).to(torch.int32)
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        else:
            metadata.seq_lens_k = seq_lens.to(torch.int32)
            metadata.max_seq_len_k = max_seq
        metadata.batch_size = bs
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP width from server args)
    # expect: SG203
    def _init_decode_metadata_cp_gated(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        max_seq = self._host_max_seq(forward_batch)
        seq_lens = forward_batch.seq_lens
        metadata = TRTLLMMLADecodeMetadata()
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        if self.attn_cp_size_cfg > 1:
            metadata.global_seq_lens_k = seq_lens.to(torch.int32)
            metadata.seq_lens_k = get_dcp_lens(
                seq_lens, self.attn_cp_size_cfg, get_parallel().dcp_rank
            ).to(torch.int32)
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(max_seq)
        else:
            metadata.seq_lens_k = seq_lens.to(torch.int32)
            metadata.max_seq_len_k = max_seq
        metadata.batch_size = bs
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (launch arguments from metadata)
    # expect: clean
    def forward_decode_from_args(self, query, kv_cache, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        args = decode_args_from_metadata(metadata, forward_batch.batch_size)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=args.block_tables,
            seq_lens=args.seq_lens,
            max_seq_len=args.max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=get_parallel().dcp_enabled,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return raw_out

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_decode (launch arguments from the batch)
    # expect: SG203
    def forward_decode_from_batch_args(self, query, kv_cache, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        args = decode_args_from_batch(metadata, forward_batch)
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=args.block_tables,
            seq_lens=args.seq_lens,
            max_seq_len=args.max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=get_parallel().dcp_enabled,
            multi_ctas_kv_counter_buffer=self._multi_ctas_kv_counter_buffer,
        )
        return raw_out

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP block, bound helper)
    # expect: clean
    def init_decode_metadata_partial(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        max_seq = self._host_max_seq(forward_batch)
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            ),
            max_seq_len_k=self._get_dcp_local_max_seq_len(max_seq),
        )
        metadata.global_seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        metadata.seq_lens_k = self._local_lens_fn(forward_batch.seq_lens).to(
            torch.int32
        )
        metadata.batch_size = bs
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (DCP block, bound helper)
    # expect: SG203
    def init_decode_metadata_partial_max_only(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        local_cpu = self._local_lens_fn(forward_batch.seq_lens_cpu)
        max_seq = int(local_cpu.max().item())
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(self._host_max_seq(forward_batch)),
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                forward_batch.seq_lens.device,
            ),
            max_seq_len_k=max(max_seq, 1),
        )
        metadata.global_seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        metadata.seq_lens_k = forward_batch.seq_lens.to(torch.int32)
        metadata.batch_size = bs
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP-off early return)
    # expect: clean
    def forward_decode_gated(self, query, kv_cache, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        if not get_parallel().dcp_enabled:
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens[:bs],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
            )
        local_seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (DCP-off early return)
    # expect: SG203
    def forward_decode_empty_guard(self, query, kv_cache, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        if get_parallel().dcp_enabled and bs == 0:
            return query.new_empty((0, layer.tp_q_head_num * layer.v_head_dim))
        return self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=get_parallel().dcp_enabled,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (verify / decode lens)
    # expect: clean
    def init_verify_or_decode_metadata(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        is_verify = forward_batch.forward_mode.is_target_verify()
        global_lens = (
            forward_batch.seq_lens + self.num_draft_tokens
            if is_verify
            else forward_batch.seq_lens
        )
        seq_lens_k = self._local(global_lens) if self.dcp_size > 1 else global_lens
        max_seq = self._host_max_seq(forward_batch) + (
            self.num_draft_tokens if is_verify else 0
        )
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                global_lens,
                global_lens.device,
            ),
            max_seq_len_k=self._local_max(max_seq),
            seq_lens_k=seq_lens_k.to(torch.int32),
            global_seq_lens_k=global_lens.to(torch.int32),
        )
        metadata.batch_size = bs
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (verify / decode lens)
    # expect: SG203
    def init_verify_or_decode_metadata_mode_gated(self, forward_batch: ForwardBatch):
        bs = forward_batch.batch_size
        is_verify = forward_batch.forward_mode.is_target_verify()
        global_lens = (
            forward_batch.seq_lens + self.num_draft_tokens
            if is_verify
            else forward_batch.seq_lens
        )
        seq_lens_k = (
            self._local(global_lens)
            if forward_batch.forward_mode.is_decode()
            else global_lens
        )
        max_seq = self._host_max_seq(forward_batch) + (
            self.num_draft_tokens if is_verify else 0
        )
        metadata = TRTLLMMLADecodeMetadata(
            block_kv_indices=self._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                self._calc_padded_blocks(max_seq),
                forward_batch.req_pool_indices,
                global_lens,
                global_lens.device,
            ),
            max_seq_len_k=self._local_max(max_seq),
            seq_lens_k=seq_lens_k.to(torch.int32),
            global_seq_lens_k=global_lens.to(torch.int32),
        )
        metadata.batch_size = bs
        self._publish(forward_batch, metadata)


class ForkTRTLLMMLABackendLite(ForkTRTLLMMLABackend):
    """Trimmed metadata path of the fork."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata
    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        forward_mode = forward_batch.forward_mode
        if not self._decode_family(forward_mode):
            return super().init_forward_metadata(forward_batch)
        bs = forward_batch.batch_size
        metadata = TRTLLMMLADecodeMetadata()
        if forward_mode.is_target_verify() or forward_mode.is_draft_extend_v2():
            self.forward_prefill_metadata = None
        max_seq = self._host_max_seq(forward_batch)
        seq_lens = forward_batch.seq_lens
        if forward_mode.is_target_verify():
            max_seq = max_seq + self.num_draft_tokens
            seq_lens = seq_lens + self.num_draft_tokens
        elif forward_mode.is_draft_extend_v2():
            max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
            metadata.max_seq_len_q = max_seq_len_q
            metadata.sum_seq_lens_q = sum(forward_batch.extend_seq_lens_cpu)
            metadata.cu_seqlens_q = torch.nn.functional.pad(
                torch.cumsum(forward_batch.extend_seq_lens, dim=0, dtype=torch.int32),
                (1, 0),
            )
            metadata.seq_lens_q = forward_batch.extend_seq_lens
            seq_lens = seq_lens - forward_batch.extend_seq_lens + max_seq_len_q
        metadata.seq_lens_k = seq_lens.to(torch.int32)
        metadata.block_kv_indices = self._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            self._calc_padded_blocks(max_seq),
            forward_batch.req_pool_indices,
            seq_lens,
            seq_lens.device,
        )
        metadata.max_seq_len_k = int(max_seq)
        metadata.batch_size = bs
        if get_parallel().dcp_enabled:
            metadata.global_seq_lens_k = metadata.seq_lens_k
            metadata.max_seq_len_k = self._get_dcp_local_max_seq_len(
                metadata.max_seq_len_k
            )
        self._publish(forward_batch, metadata)

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._apply_dcp_cuda_graph_metadata
    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self, bs, req_pool_indices, seq_lens, forward_mode, metadata
    ):
        if forward_mode.is_target_verify():
            torch.add(
                seq_lens[:bs], self.num_draft_tokens, out=metadata.global_seq_lens_k
            )
            metadata.seq_lens_k.copy_(
                self._get_dcp_local_seq_lens(metadata.global_seq_lens_k)
            )
        elif forward_mode.is_draft_extend_v2():
            metadata.max_seq_len_q = self.num_draft_tokens
            metadata.sum_seq_lens_q = self.num_draft_tokens * bs
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(seq_lens)
        else:
            seq_lens = seq_lens[:bs]
            metadata.global_seq_lens_k.copy_(seq_lens)
            metadata.seq_lens_k.copy_(self._get_dcp_local_seq_lens(seq_lens))
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            self._get_dcp_local_seq_lens(metadata.global_seq_lens_k),
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
        else:
            local_seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
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


class ForkCuteDslMLABackend(ForkTRTLLMMLABackend):
    """cute-dsl MLA decode with in-kernel DCP (rank-local out + lse)."""

    def __init__(
        self,
        model_runner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(
            model_runner,
            skip_prefill,
            kv_indptr_buf,
            q_indptr_decode_buf,
            backend="cute-dsl",
        )

    def _query_and_cache(self, q, q_rope, layer, forward_batch):
        if q_rope is not None:
            q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            q_rope = q_rope.view(
                -1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim
            )
            query = torch.cat([q_nope, q_rope], dim=-1)
        else:
            query = q.view(-1, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        return query, kv_cache

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: clean
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1:
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
            raise ValueError(
                "causal_seqs (global per-request KV lengths) is required for DCP "
                "MLA decode."
            )
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
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
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=(
                causal_seqs
                if causal_seqs.dtype == torch.int32
                else causal_seqs.to(torch.int32)
            ),
            return_lse=True,
        )
        return raw_out, lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
    # expect: clean
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None
    ):
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        query, kv_cache = self._query_and_cache(q, q_rope, layer, forward_batch)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = self._get_dcp_local_seq_lens(global_seq_lens)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
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
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch)
    # expect: clean
    def forward_target_verify_dcp(self, q, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = self._run_decode_kernel(
            query=q,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=metadata.global_seq_lens_k,
            cp_world=get_parallel().dcp_size,
            cp_rank=get_parallel().dcp_rank,
            return_lse=True,
        )
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class ForkCuteDslMLABackendV0(ForkCuteDslMLABackend):
    """First cut of the fork's cute-dsl DCP path (kept for A/B runs)."""

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: SG203
    def _run_decode_kernel(
        self,
        query,
        kv_cache,
        block_tables,
        seq_lens,
        max_seq_len,
        layer,
        *,
        causal_seqs=None,
        cp_world: int = 1,
        cp_rank: int = 0,
        return_lse: bool = False,
    ):
        if cp_world <= 1:
            return TRTLLMMLABackend._run_decode_kernel(
                self,
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
            raise ValueError(
                "causal_seqs (global per-request KV lengths) is required for DCP "
                "MLA decode."
            )
        kernel_lens = causal_seqs.to(torch.int32)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=kernel_lens,
            max_seq_len=max_seq_len,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=cp_world,
            cp_rank=cp_rank,
            causal_seqlens_kv_global=kernel_lens,
            return_lse=True,
        )
        return raw_out, lse

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode
    # expect: SG203
    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None
    ):
        parallel = get_parallel()
        if parallel.dcp_enabled and get_in_autotune_dummy_run():
            return self._dummy_dcp_decode_for_autotune(q, layer)
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        query, kv_cache = self._query_and_cache(q, q_rope, layer, forward_batch)
        if query.dim() == 3:
            query = query.unsqueeze(1)
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is not None and metadata.global_seq_lens_k is not None:
            local_seq_lens = metadata.seq_lens_k[:bs]
            global_seq_lens = metadata.global_seq_lens_k[:bs]
        else:
            global_seq_lens = forward_batch.seq_lens[:bs]
            local_seq_lens = global_seq_lens
        raw_out, lse = ForkCuteDslMLABackend._run_decode_kernel(
            self,
            query=query,
            kv_cache=kv_cache,
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
        fixup_zero_kv_rows(
            output, lse, local_seq_lens, self.q_indptr_decode[: bs + 1], 1
        )
        return output.flatten(1), lse

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (DCP target-verify branch)
    # expect: SG203
    def forward_target_verify_dcp(self, q, layer, forward_batch):
        metadata = forward_batch.decode_trtllm_mla_metadata or self.forward_decode_metadata
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        q = q.to(self.data_type).view(bs, -1, layer.tp_q_head_num, layer.head_dim)
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=q,
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
        output = raw_out.view(bs * draft_token_num, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(bs * draft_token_num, layer.tp_q_head_num)
        fixup_zero_kv_rows(
            output,
            lse,
            metadata.seq_lens_k,
            self._dense_q_indptr(bs, draft_token_num),
            draft_token_num,
        )
        return output.flatten(1), lse


class ForkTRTLLMMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """Per-step draft backends; graph replay refreshes every step's lens."""

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata_out_graph
    # expect: clean
    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        if in_capture or not get_parallel().dcp_enabled:
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        req_pool_indices = forward_batch.req_pool_indices[:bs]
        seq_lens = forward_batch.seq_lens[:bs]
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            metadata = backend.decode_cuda_graph_metadata[bs]
            step_lens = seq_lens + i + 1
            metadata.global_seq_lens_k.copy_(step_lens)
            metadata.seq_lens_k.copy_(backend._get_dcp_local_seq_lens(step_lens))
            backend._fill_dcp_block_kv_indices(
                metadata.block_kv_indices, req_pool_indices, metadata.seq_lens_k
            )
            backend.forward_decode_metadata = metadata


class ForkTRTLLMMLAMultiStepDraftBackendV0(ForkTRTLLMMLAMultiStepDraftBackend):
    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata_out_graph
    # expect: SG203
    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        if in_capture or not get_parallel().dcp_enabled:
            return super().init_forward_metadata_out_graph(
                forward_batch, in_capture=in_capture
            )
        bs = forward_batch.batch_size
        req_pool_indices = forward_batch.req_pool_indices[:bs]
        seq_lens = forward_batch.seq_lens[:bs]
        for i in range(self.speculative_num_steps - 1):
            backend = self.attn_backends[i]
            metadata = backend.decode_cuda_graph_metadata[bs]
            step_lens = seq_lens + i + 1
            metadata.global_seq_lens_k.copy_(step_lens)
            metadata.seq_lens_k.copy_(step_lens)
            backend._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                req_pool_indices,
                backend._get_dcp_local_seq_lens(step_lens),
            )
            backend.forward_decode_metadata = metadata
