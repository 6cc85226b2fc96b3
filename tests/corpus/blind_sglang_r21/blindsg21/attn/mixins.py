"""DCP decode mixins for ``_DcpDecodeBase`` backends.

``forward_batch.decode_trtllm_mla_metadata`` is only attached by the eager
``init_forward_metadata``; batches that come through CUDA-graph capture /
replay do not carry it, and their ``seq_lens`` are the runner's static
buffers (refreshed before each replay).
"""

from __future__ import annotations

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

from blindsg21.attn.cutedsl_mla_fork import _DcpDecodeBase


class GraphAwareDcpDecodeMixin:
    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        eager_md = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if eager_md is not None:
            local_lens = eager_md.seq_lens_k[:bs]
            global_lens = eager_md.global_seq_lens_k[:bs]
        else:
            # Graph path: the static seq_lens buffer is current for this replay
            # and the captured page table already holds only this rank's pages.
            global_lens = forward_batch.seq_lens[:bs]
            local_lens = global_lens.to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class LocalisingDcpDecodeMixin:
    # expect: clean
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        eager_md = getattr(forward_batch, "decode_trtllm_mla_metadata", None)
        if eager_md is not None:
            local_lens = eager_md.seq_lens_k[:bs]
            global_lens = eager_md.global_seq_lens_k[:bs]
        else:
            global_lens = forward_batch.seq_lens[:bs]
            local_lens = get_dcp_lens(
                global_lens, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=global_lens,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )
        return self._rank_local_state(raw_out, lse, local_lens, layer, bs)


class GraphAwareCuteDslBackend(GraphAwareDcpDecodeMixin, _DcpDecodeBase):
    pass


class LocalisingCuteDslBackend(LocalisingDcpDecodeMixin, _DcpDecodeBase):
    pass
