"""Metadata builders for the forked TRTLLM/CuteDSL MLA decode family.

A builder turns a ForwardBatch into the ``ForkDecodeMeta`` the decode /
target-verify / draft-extend launches read (``seq_lens_k`` is what the
kernel gets as this rank's KV lengths, ``global_seq_lens_k`` the causal
bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg32.mla_dcp.dcp_math import DcpShard, cu_lens, rank_view_lens


@dataclass
class ForkDecodeMeta:
    block_kv_indices: Optional[torch.Tensor] = None
    seq_lens_k: Optional[torch.Tensor] = None
    global_seq_lens_k: Optional[torch.Tensor] = None
    max_seq_len_k: Optional[int] = None
    batch_size: Optional[int] = None
    max_seq_len_q: Optional[int] = None
    sum_seq_lens_q: Optional[int] = None
    cu_seqlens_q: Optional[torch.Tensor] = None
    seq_lens_q: Optional[torch.Tensor] = None


class DecodeMetaBuilder:
    def __init__(self, backend: Any, shard: Optional[DcpShard] = None):
        self.backend = backend
        self.shard = shard or DcpShard.current()
        self.max_context_len = backend.max_context_len

    @classmethod
    def for_backend(cls, backend: Any) -> "DecodeMetaBuilder":
        return cls(backend)

    def _max_seq(self, forward_batch: ForwardBatch, extra: int = 0) -> int:
        if forward_batch.seq_lens_cpu is not None:
            return int(forward_batch.seq_lens_cpu.max().item()) + extra
        return self.max_context_len + extra

    def _block_table(self, forward_batch: ForwardBatch, bs: int, global_lens: torch.Tensor, max_seq: int) -> torch.Tensor:
        blocks = self.backend._calc_padded_blocks(max_seq)
        # The backend builds the page table over this rank's cyclic slice
        # itself when DCP is on.
        return self.backend._create_block_kv_indices(
            forward_batch.kv_loc_plan,
            bs,
            blocks,
            forward_batch.req_pool_indices,
            global_lens,
            global_lens.device,
        )

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (decode + DCP tail); seq_lens_k localized via DcpShard.localize, global kept as causal bound
    # expect: clean
    def build(self, forward_batch: ForwardBatch) -> ForkDecodeMeta:
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        max_seq = self._max_seq(forward_batch)
        return ForkDecodeMeta(
            block_kv_indices=self._block_table(forward_batch, bs, global_lens, max_seq),
            seq_lens_k=self.shard.localize(global_lens),
            global_seq_lens_k=global_lens,
            max_seq_len_k=self.shard.local_max(max_seq),
            batch_size=bs,
        )


class RankViewDecodeMetaBuilder(DecodeMetaBuilder):
    """Decode builder that keeps the unsharded view on rank 0."""

    # idiom: layers/attention/trtllm_mla_backend.py _get_dcp_local_seq_lens; seq_lens_k comes from rank_view_lens, which returns the whole lengths on DCP rank 0
    # expect: SG203
    def build(self, forward_batch: ForwardBatch) -> ForkDecodeMeta:
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        max_seq = self._max_seq(forward_batch)
        return ForkDecodeMeta(
            block_kv_indices=self._block_table(forward_batch, bs, global_lens, max_seq),
            seq_lens_k=rank_view_lens(global_lens, self.shard),
            global_seq_lens_k=global_lens,
            max_seq_len_k=self.shard.local_max(max_seq),
            batch_size=bs,
        )


class DraftExtendMetaBuilder(DecodeMetaBuilder):
    # idiom: layers/attention/trtllm_mla_backend.py init_forward_metadata draft_extend_v2 branch (NOTE draft_extend seq_len handling); seq_lens_k keeps the padded whole lengths under DCP
    # expect: SG203
    def build(self, forward_batch: ForwardBatch) -> ForkDecodeMeta:
        bs = forward_batch.batch_size
        extend_lens = forward_batch.extend_seq_lens[:bs]
        max_q = max(forward_batch.extend_seq_lens_cpu[:bs])
        # Every row attends as if it had max_q queries (the padded q layout).
        kernel_lens = (forward_batch.seq_lens[:bs] - extend_lens + max_q).to(torch.int32)
        max_seq = self._max_seq(forward_batch)
        return ForkDecodeMeta(
            block_kv_indices=self._block_table(forward_batch, bs, kernel_lens, max_seq),
            seq_lens_k=kernel_lens,
            global_seq_lens_k=kernel_lens,
            max_seq_len_k=self.shard.local_max(max_seq),
            batch_size=bs,
            max_seq_len_q=max_q,
            sum_seq_lens_q=int(sum(forward_batch.extend_seq_lens_cpu[:bs])),
            cu_seqlens_q=cu_lens(extend_lens),
            seq_lens_q=extend_lens,
        )


class VerifyMetaBuilder(DecodeMetaBuilder):
    def __init__(self, backend: Any, num_draft_tokens: int, shard: Optional[DcpShard] = None):
        super().__init__(backend, shard)
        self.num_draft_tokens = num_draft_tokens

    # idiom: layers/attention/trtllm_mla_backend.py _apply_dcp_cuda_graph_metadata target-verify branch; global = seq_lens + draft tokens, seq_lens_k = its rank-local share
    # expect: clean
    def build(self, forward_batch: ForwardBatch) -> ForkDecodeMeta:
        bs = forward_batch.batch_size
        global_lens = (forward_batch.seq_lens[:bs] + self.num_draft_tokens).to(torch.int32)
        max_seq = self._max_seq(forward_batch, extra=self.num_draft_tokens)
        return ForkDecodeMeta(
            block_kv_indices=self._block_table(forward_batch, bs, global_lens, max_seq),
            seq_lens_k=self.shard.localize(global_lens),
            global_seq_lens_k=global_lens,
            max_seq_len_k=self.shard.local_max(max_seq),
            batch_size=bs,
        )


class MultiStepDraftMetaBuilder(DecodeMetaBuilder):
    """One decode metadata per chain step of the MTP draft (topk == 1)."""

    def __init__(self, backend: Any, num_steps: int, shard: Optional[DcpShard] = None):
        super().__init__(backend, shard)
        self.num_steps = num_steps

    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata; per-step seq_lens_k = seq_lens + step + 1, not localized under DCP
    # expect: SG203
    def build_steps(self, forward_batch: ForwardBatch) -> List[ForkDecodeMeta]:
        bs = forward_batch.batch_size
        base = forward_batch.seq_lens[:bs]
        metas: List[ForkDecodeMeta] = []
        for step in range(self.num_steps - 1):
            step_lens = (base + step + 1).to(torch.int32)
            max_seq = self._max_seq(forward_batch, extra=step + 1)
            metas.append(
                ForkDecodeMeta(
                    block_kv_indices=self._block_table(forward_batch, bs, step_lens, max_seq),
                    seq_lens_k=step_lens,
                    global_seq_lens_k=step_lens,
                    max_seq_len_k=self.shard.local_max(max_seq),
                    batch_size=bs,
                )
            )
        return metas


class LocalMultiStepDraftMetaBuilder(MultiStepDraftMetaBuilder):
    # idiom: layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend.init_forward_metadata; per-step lengths localized through the shard before they land in seq_lens_k
    # expect: clean
    def build_steps(self, forward_batch: ForwardBatch) -> List[ForkDecodeMeta]:
        bs = forward_batch.batch_size
        base = forward_batch.seq_lens[:bs]
        metas: List[ForkDecodeMeta] = []
        for step in range(self.num_steps - 1):
            step_lens = (base + step + 1).to(torch.int32)
            max_seq = self._max_seq(forward_batch, extra=step + 1)
            metas.append(
                ForkDecodeMeta(
                    block_kv_indices=self._block_table(forward_batch, bs, step_lens, max_seq),
                    seq_lens_k=self.shard.localize(step_lens),
                    global_seq_lens_k=step_lens,
                    max_seq_len_k=self.shard.local_max(max_seq),
                    batch_size=bs,
                )
            )
        return metas
