"""Fork of the trtllm MLA backend with alternative DCP decode paths.

The rank-local decode variants here are selected by ``dcp_decode_variant``
(a server-arg in the fork); all of them return ``(out, lse)`` for the model's
cross-rank merge, as upstream's ``_forward_decode_dcp`` does.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg4.dcp.lens import kernel_lens, local_max_len, rank_local_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


def _finish(backend, raw_out, lse, local_lens, layer, bs):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_lens, backend.q_indptr_decode[: bs + 1], 1)
    return output.flatten(1), lse


class ForkTRTLLMMLABackend(TRTLLMMLABackend):
    dcp_decode_variant: str = "metadata"

    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        variant = self.dcp_decode_variant
        if variant == "batch":
            return self._decode_dcp_from_batch(query, kv_cache, metadata, layer, forward_batch)
        if variant == "helper":
            return self._decode_dcp_helper_local(query, kv_cache, metadata, layer, forward_batch)
        return super()._forward_decode_dcp(query, kv_cache, metadata, layer, forward_batch)

    # expect: SG203
    def _decode_dcp_from_batch(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(
                int(forward_batch.seq_lens_cpu[:bs].max())
            ),
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, self._get_dcp_local_seq_lens(seq_lens), layer, bs)

    # expect: clean
    def _decode_dcp_from_batch_local(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=self._get_dcp_local_max_seq_len(
                int(forward_batch.seq_lens_cpu[:bs].max())
            ),
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, seq_lens, layer, bs)

    # expect: SG203
    def _decode_dcp_helper(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        lens = kernel_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=local_max_len(int(lens.max().item())),
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, rank_local_lens(lens), layer, bs)

    # expect: clean
    def _decode_dcp_helper_local(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        lens = rank_local_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=local_max_len(int(forward_batch.seq_lens_cpu[:bs].max())),
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, lens, layer, bs)

    # expect: SG203
    def _decode_dcp_global_meta(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        # global_seq_lens_k is the int32 copy kept once per step; prefer it
        # over re-casting forward_batch.seq_lens in every layer.
        seq_lens = (
            metadata.global_seq_lens_k[:bs]
            if metadata.global_seq_lens_k is not None
            else metadata.seq_lens_k[:bs]
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
        return _finish(self, raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)

    # expect: clean
    def _decode_dcp_local_meta(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
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
        return _finish(self, raw_out, lse, seq_lens, layer, bs)

    # expect: SG203
    def _decode_dcp_partial(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        run = functools.partial(
            self._run_decode_kernel,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            layer=layer,
            return_lse=True,
        )
        if get_parallel().dcp_enabled and metadata.seq_lens_k is None:
            # Graph-less warmup: metadata has no per-step lens yet.
            seq_lens = forward_batch.seq_lens[:bs]
        else:
            seq_lens = metadata.seq_lens_k[:bs]
        raw_out, lse = run(
            query=query, seq_lens=seq_lens, max_seq_len=metadata.max_seq_len_k
        )
        return _finish(self, raw_out, lse, seq_lens, layer, bs)

    # expect: clean
    def _decode_dcp_partial_local(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        if metadata.seq_lens_k is None:
            seq_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        else:
            seq_lens = metadata.seq_lens_k[:bs]
        run = functools.partial(
            self._run_decode_kernel,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            layer=layer,
            return_lse=True,
        )
        raw_out, lse = run(query=query, max_seq_len=metadata.max_seq_len_k)
        return _finish(self, raw_out, lse, seq_lens, layer, bs)

    # expect: clean
    def _verify_dcp_via_base_kernel(
        self,
        q: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        """Target verify under DCP: trtllm-gen has no global causal bound, so
        the base hook refuses the multi-token query (NotImplementedError)."""
        bs = forward_batch.batch_size
        draft_token_num = forward_batch.spec_info.draft_token_num
        q = q.view(bs, draft_token_num, layer.tp_q_head_num, layer.head_dim)
        return self._run_decode_kernel(
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


class CachedLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Caches the int32 decode lengths once per step instead of per layer."""

    _dcp_kernel_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._dcp_kernel_lens = forward_batch.seq_lens.to(torch.int32)

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = self._dcp_kernel_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, self._get_dcp_local_seq_lens(lens), layer, bs)


class CachedLocalLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Same per-step cache, holding this rank's share of the lengths."""

    _dcp_kernel_lens: Optional[torch.Tensor] = None

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        if forward_batch.forward_mode.is_decode_or_idle():
            self._dcp_kernel_lens = self._get_dcp_local_seq_lens(
                forward_batch.seq_lens
            ).to(torch.int32)

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = self._dcp_kernel_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, lens, layer, bs)


class PropLensTRTLLMMLABackend(TRTLLMMLABackend):
    @property
    def _kernel_seq_lens(self) -> torch.Tensor:
        # Rank-local under DCP (init_forward_metadata localises seq_lens_k).
        return self.forward_decode_metadata.seq_lens_k

    # expect: clean
    def decode_rank_local(
        self, query: torch.Tensor, kv_cache: torch.Tensor, layer: "RadixAttention", bs: int
    ):
        metadata = self.forward_decode_metadata
        lens = self._kernel_seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class MergeAwareTRTLLMMLABackend(PropLensTRTLLMMLABackend):
    """Feeds the model-side merge the request's full length."""

    @property
    def _kernel_seq_lens(self) -> torch.Tensor:
        metadata = self.forward_decode_metadata
        if metadata.global_seq_lens_k is not None:
            return metadata.global_seq_lens_k
        return metadata.seq_lens_k

    # expect: SG203
    def forward_decode_for_merge(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        if not get_parallel().dcp_enabled:
            raise RuntimeError("merge path is DCP-only")
        if query.dim() == 3:
            query = query.unsqueeze(1)
        return self.decode_rank_local(query, kv_cache, layer, forward_batch.batch_size)
