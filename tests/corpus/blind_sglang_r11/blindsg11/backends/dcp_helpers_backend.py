"""trtllm_mla DCP decode variants built on the blindsg11.util helpers."""

from __future__ import annotations

import dataclasses
import os

import torch

from blindsg11.backends.trtllm_mla_dcp import _DcpDecodeBase
from blindsg11.util.dcp_launch import launch_mla_decode, make_decode_fn
from blindsg11.util.dcp_lens import DcpKvLens, pad_rows, rank_local_seq_lens, rank_share


class HelperDcpBackend(_DcpDecodeBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        # global_seq_lens_k is refreshed once per step (int32, graph-stable).
        lens = metadata.global_seq_lens_k[:bs]
        raw_out, lse = launch_mla_decode(
            self, query, kv_cache, metadata.block_kv_indices, lens,
            metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, layer, lens, bs)


class HelperLocalDcpBackend(_DcpDecodeBase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = rank_share(forward_batch.seq_lens[:bs])
        raw_out, lse = launch_mla_decode(
            self, query, kv_cache, metadata.block_kv_indices, lens,
            metadata.max_seq_len_k, layer,
        )
        return self._finish_dcp(raw_out, lse, layer, lens, bs)


class ClosureDcpBackend(_DcpDecodeBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = forward_batch.seq_lens[:bs].to(torch.int32)
        decode = make_decode_fn(
            self, layer, metadata.block_kv_indices, lens, metadata.max_seq_len_k
        )
        raw_out, lse = decode(query, kv_cache)
        return self._finish_dcp(raw_out, lse, layer, lens, bs)


class ClosureLocalDcpBackend(_DcpDecodeBase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        decode = make_decode_fn(
            self, layer, metadata.block_kv_indices, lens, metadata.max_seq_len_k
        )
        raw_out, lse = decode(query, kv_cache)
        return self._finish_dcp(raw_out, lse, layer, lens, bs)


class ContextViewDcpBackend(_DcpDecodeBase):
    """Rebuilds this rank's page table per step (the metadata one can be stale
    after a PD-disagg transfer)."""

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        with rank_local_seq_lens(forward_batch) as local_lens:
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                forward_batch.req_pool_indices[:bs],
                local_lens[:bs],
            )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, forward_batch.seq_lens[:bs], bs)


class ContextViewLocalDcpBackend(_DcpDecodeBase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        with rank_local_seq_lens(forward_batch) as local_lens:
            self._fill_dcp_block_kv_indices(
                metadata.block_kv_indices,
                forward_batch.req_pool_indices[:bs],
                local_lens[:bs],
            )
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens[:bs],
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )
            return self._finish_dcp(raw_out, lse, layer, local_lens[:bs], bs)


class DataclassLensBackend(_DcpDecodeBase):
    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = DcpKvLens.for_rank(forward_batch.seq_lens[:bs])
        rows = metadata.block_kv_indices.shape[0]
        if rows > bs:
            # Graph-bucket metadata: pad the query and the lens to the table's
            # row count (fill 1, as get_cuda_graph_seq_len_fill_value).
            query = torch.cat([query, query.new_zeros((rows - bs, *query.shape[1:]))])
            lens = dataclasses.replace(lens, local=pad_rows(lens.global_, rows))
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=DcpKvLens.max_local(metadata.max_seq_len_k),
            layer=layer,
            return_lse=True,
        )
        raw_out, lse = raw_out[:bs], lse[:bs]
        return self._finish_dcp(raw_out, lse, layer, lens.local[:bs], bs)


class DataclassLensPaddedBackend(_DcpDecodeBase):
    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = DcpKvLens.for_rank(forward_batch.seq_lens[:bs])
        rows = metadata.block_kv_indices.shape[0]
        if rows > bs:
            query = torch.cat([query, query.new_zeros((rows - bs, *query.shape[1:]))])
            lens = dataclasses.replace(
                lens,
                local=pad_rows(lens.local, rows),
                global_=pad_rows(lens.global_, rows),
            )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=DcpKvLens.max_local(metadata.max_seq_len_k),
            layer=layer,
            return_lse=True,
        )
        raw_out, lse = raw_out[:bs], lse[:bs]
        return self._finish_dcp(raw_out, lse, layer, lens.local[:bs], bs)


class PageInterleaveDcpBackend(_DcpDecodeBase):
    @property
    def dcp_interleave_size(self) -> int:
        return int(os.environ.get("SGLANG_DCP_INTERLEAVE_SIZE", "1"))

    # expect: SG203
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        if self.dcp_interleave_size > 1:
            # get_dcp_lens here assumes token interleave; with page interleave
            # the page table already stops at this rank's last page.
            lens = DcpKvLens.unsharded(forward_batch.seq_lens[:bs])
        else:
            lens = DcpKvLens.for_rank(forward_batch.seq_lens[:bs])
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, lens.local, bs)


class PageInterleaveLocalDcpBackend(_DcpDecodeBase):
    @property
    def dcp_interleave_size(self) -> int:
        return int(os.environ.get("SGLANG_DCP_INTERLEAVE_SIZE", "1"))

    # expect: clean
    def _forward_decode_dcp(self, query, kv_cache, metadata, layer, forward_batch):
        bs = forward_batch.batch_size
        lens = DcpKvLens.for_rank(
            forward_batch.seq_lens[:bs], interleave_size=self.dcp_interleave_size
        )
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=lens.local,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return self._finish_dcp(raw_out, lse, layer, lens.local, bs)
