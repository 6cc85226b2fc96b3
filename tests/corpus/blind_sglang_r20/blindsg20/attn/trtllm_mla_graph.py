"""CUDA-graph capture/replay metadata overrides for the trtllm_mla family.

Replay refreshes the capture-stable metadata buffers in place; the captured
decode kernel reads ``metadata.seq_lens_k`` / ``metadata.block_kv_indices``
from those buffers on every replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.kv_indices import (
    create_flashmla_kv_indices_triton,
    get_num_kv_index_blocks_flashmla,
)
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
    TRTLLMMLAMultiStepDraftBackend,
)
from sglang.srt.layers.dcp.layout import update_local_kv_lens_for_dcp
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel

from blindsg20.common.flags import ForkSpecFlags

if TYPE_CHECKING:
    from sglang.srt.mem_cache.kv_loc_plan import KVLocPlan
    from sglang.srt.model_executor.model_runner import ModelRunner


class InPlaceDcpReplayTRTLLMMLABackend(TRTLLMMLABackend):
    """Decode replay that localises the lengths in place (no temporaries)."""

    # expect: SG203
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        live = seq_lens[:bs]
        metadata.seq_lens_k.copy_(live)
        metadata.global_seq_lens_k.copy_(live)
        # In place, so the replay allocates nothing outside the graph pool.
        update_local_kv_lens_for_dcp(metadata.global_seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            metadata.global_seq_lens_k,
        )


class InPlaceDcpReplayLocalTRTLLMMLABackend(TRTLLMMLABackend):
    """InPlaceDcpReplayTRTLLMMLABackend localising the kernel's buffer."""

    # expect: clean
    def _apply_dcp_cuda_graph_metadata(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
        metadata: TRTLLMMLADecodeMetadata,
    ):
        if not forward_mode.is_decode_or_idle():
            return super()._apply_dcp_cuda_graph_metadata(
                bs, req_pool_indices, seq_lens, forward_mode, metadata
            )
        live = seq_lens[:bs]
        metadata.global_seq_lens_k.copy_(live)
        metadata.seq_lens_k.copy_(live)
        update_local_kv_lens_for_dcp(metadata.seq_lens_k)
        self._fill_dcp_block_kv_indices(
            metadata.block_kv_indices,
            req_pool_indices[:bs],
            metadata.seq_lens_k,
        )


class FastReplayTRTLLMMLABackend(TRTLLMMLABackend):
    """Plain decode replay without the generic verify/draft-extend dispatch."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._fast_decode_replay = ForkSpecFlags.from_server_args(
            model_runner.server_args
        ).fast_decode_replay

    # expect: SG203
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if (
            self._fast_decode_replay
            and forward_mode.is_decode_or_idle()
            and not self.kv_index_translator.is_translating
        ):
            metadata = self.decode_cuda_graph_metadata[bs]
            metadata.seq_lens_k.copy_(seq_lens[:bs])
            block_kv_indices = metadata.block_kv_indices
            create_flashmla_kv_indices_triton[
                (
                    bs,
                    get_num_kv_index_blocks_flashmla(
                        block_kv_indices.shape[1], self.page_size
                    ),
                )
            ](
                self.req_to_token,
                req_pool_indices[:bs],
                metadata.seq_lens_k,
                None,
                block_kv_indices,
                self.req_to_token.stride(0),
                block_kv_indices.shape[1],
                PAGED_SIZE=self.page_size,
            )
            return
        return super()._apply_cuda_graph_metadata(
            plan, bs, req_pool_indices, seq_lens, forward_mode
        )


class GuardedFastReplayTRTLLMMLABackend(TRTLLMMLABackend):
    """FastReplayTRTLLMMLABackend that leaves DCP replays to upstream."""

    def __init__(self, model_runner: ModelRunner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self._fast_decode_replay = ForkSpecFlags.from_server_args(
            model_runner.server_args
        ).fast_decode_replay

    # expect: clean
    def _apply_cuda_graph_metadata(
        self,
        plan: KVLocPlan,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        forward_mode: ForwardMode,
    ):
        if (
            self._fast_decode_replay
            and forward_mode.is_decode_or_idle()
            and not self.kv_index_translator.is_translating
            and not get_parallel().dcp_enabled
        ):
            metadata = self.decode_cuda_graph_metadata[bs]
            metadata.seq_lens_k.copy_(seq_lens[:bs])
            block_kv_indices = metadata.block_kv_indices
            create_flashmla_kv_indices_triton[
                (
                    bs,
                    get_num_kv_index_blocks_flashmla(
                        block_kv_indices.shape[1], self.page_size
                    ),
                )
            ](
                self.req_to_token,
                req_pool_indices[:bs],
                metadata.seq_lens_k,
                None,
                block_kv_indices,
                self.req_to_token.stride(0),
                block_kv_indices.shape[1],
                PAGED_SIZE=self.page_size,
            )
            return
        return super()._apply_cuda_graph_metadata(
            plan, bs, req_pool_indices, seq_lens, forward_mode
        )


class SharedTableTRTLLMMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """Builds the draft block table once and shares it across step backends."""

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        num_steps = self.speculative_num_steps - 1
        if num_steps <= 0:
            return
        head = self.attn_backends[0]
        head.init_forward_metadata(forward_batch)
        shared: Optional[TRTLLMMLADecodeMetadata] = head.forward_decode_metadata
        bs = forward_batch.batch_size
        # Draft decode steps all attend over the same committed prefix.
        step_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        for i in range(1, num_steps):
            metadata = TRTLLMMLADecodeMetadata(
                block_kv_indices=shared.block_kv_indices,
                max_seq_len_k=shared.max_seq_len_k,
                seq_lens_k=step_lens,
                global_seq_lens_k=shared.global_seq_lens_k,
            )
            metadata.batch_size = bs
            self.attn_backends[i].forward_decode_metadata = metadata
        # Let each step read its own backend's metadata.
        forward_batch.decode_trtllm_mla_metadata = None


class SharedTableLocalTRTLLMMLAMultiStepDraftBackend(TRTLLMMLAMultiStepDraftBackend):
    """SharedTableTRTLLMMLAMultiStepDraftBackend reusing the head's lengths."""

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        num_steps = self.speculative_num_steps - 1
        if num_steps <= 0:
            return
        head = self.attn_backends[0]
        head.init_forward_metadata(forward_batch)
        shared: Optional[TRTLLMMLADecodeMetadata] = head.forward_decode_metadata
        bs = forward_batch.batch_size
        # The head's metadata already holds the rank-local view under DCP.
        step_lens = shared.seq_lens_k
        for i in range(1, num_steps):
            metadata = TRTLLMMLADecodeMetadata(
                block_kv_indices=shared.block_kv_indices,
                max_seq_len_k=shared.max_seq_len_k,
                seq_lens_k=step_lens,
                global_seq_lens_k=shared.global_seq_lens_k,
            )
            metadata.batch_size = bs
            self.attn_backends[i].forward_decode_metadata = metadata
        forward_batch.decode_trtllm_mla_metadata = None
