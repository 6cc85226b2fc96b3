"""TRT-LLM MLA backend variants carried by the fork for DCP decode."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg6.dcp.lens import LenSource, lens_for, rank_kv_lens, shard_kv_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention


def _finish(backend, raw_out, lse, local_seq_lens, layer, bs):
    output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(output, lse, local_seq_lens, backend.q_indptr_decode[: bs + 1], 1)
    return output.flatten(1), lse


class ScheduledLenTRTLLMBackend(TRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        # the metadata copy may be stale after DP padding; read the batch
        kv_lens = forward_batch.seq_lens[:bs]
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, kv_lens, layer, bs)


class ShardedLenTRTLLMBackend(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: ForwardBatch,
    ):
        bs = forward_batch.batch_size
        kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, kv_lens, layer, bs)


class CachedLenTRTLLMBackend(TRTLLMMLABackend):
    """Caches the decode KV lengths once per step instead of per layer."""

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._step_kv_lens = forward_batch.seq_lens.to(torch.int32)

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        assert get_parallel().dcp_enabled
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, self._step_kv_lens[:bs], layer, bs)


class CachedShardLenTRTLLMBackend(TRTLLMMLABackend):
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._step_kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens)

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        assert get_parallel().dcp_enabled
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._step_kv_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, self._step_kv_lens[:bs], layer, bs)


class HelperLenTRTLLMBackend(TRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local = rank_kv_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, local, layer, bs)

    # expect: clean
    def _forward_decode_dcp_sharded(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        local = shard_kv_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, local, layer, bs)


class ModeLenTRTLLMBackend(TRTLLMMLABackend):
    """Length source picked once at construction."""

    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.len_source = LenSource.WHOLE

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = lens_for(self.len_source, forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, kv_lens, layer, bs)


class DcpAwareModeLenTRTLLMBackend(TRTLLMMLABackend):
    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.len_source = (
            LenSource.RANK_SHARD if get_parallel().dcp_enabled else LenSource.WHOLE
        )

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        kv_lens = lens_for(self.len_source, forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish(self, raw_out, lse, kv_lens, layer, bs)


class EarlyExitTRTLLMBackend(TRTLLMMLABackend):
    def _query_and_cache(self, q, q_rope, layer, forward_batch):
        q_nope = q.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        q_pe = q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim)
        query = torch.cat([q_nope, q_pe], dim=-1).unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = k_cache.view(-1, self.page_size, k_cache.shape[-1]).unsqueeze(1)
        return query, kv_cache

    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kw):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, **kw
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)
        query, kv_cache = self._query_and_cache(q, q_rope, layer, forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        lens = metadata.global_seq_lens_k[:bs]
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

    # expect: clean
    def forward_decode_local(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kw):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, **kw
            )
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)
        query, kv_cache = self._query_and_cache(q, q_rope, layer, forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        lens = self._get_dcp_local_seq_lens(metadata.global_seq_lens_k[:bs])
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

    # expect: clean
    def forward_decode_no_dcp(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, **kw):
        if get_parallel().dcp_enabled:
            raise NotImplementedError("forward_decode_no_dcp: DCP must be off")
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)
        query, kv_cache = self._query_and_cache(q, q_rope, layer, forward_batch)
        metadata = forward_batch.decode_trtllm_mla_metadata
        raw_out = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
