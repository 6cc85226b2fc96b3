"""Ways the fork assembles the cute-dsl DCP decode launch: explicit kwargs
dicts, launches pre-bound at metadata time, argument dataclasses, and
micro-batched launches that bound the split-KV workspace."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from sglang.srt.environ import envs
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

from blindsg21.attn.cutedsl_mla_fork import _DcpDecodeBase
from blindsg21.attn.mla_launch import dcp_launch_kwargs
from blindsg21.common import flags

if is_flashinfer_available():
    import flashinfer


def _base_launch_kwargs(backend, query, kv_cache, block_tables, max_seq_len, layer):
    return dict(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=backend.workspace_buffer,
        qk_nope_head_dim=backend.qk_nope_head_dim,
        kv_lora_rank=backend.kv_lora_rank,
        qk_rope_head_dim=backend.qk_rope_head_dim,
        block_tables=block_tables,
        max_seq_len=max_seq_len,
        bmm1_scale=backend._compute_decode_bmm1_scale(layer),
        skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
    )


class KwargsLaunchCuteDslBackend(_DcpDecodeBase):
    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        bs = forward_batch.batch_size
        launch = _base_launch_kwargs(
            self, query, kv_cache, md.block_kv_indices, md.max_seq_len_k, layer
        )
        launch.update(dcp_launch_kwargs(md.global_seq_lens_k[:bs]))
        # Reuse the int32 tensor dcp_launch_kwargs already made.
        launch["seq_lens"] = launch["causal_seqlens_kv_global"]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**launch)
        return self._rank_local_state(raw_out, lse, md.seq_lens_k[:bs], layer, bs)


class KwargsLocalLaunchCuteDslBackend(_DcpDecodeBase):
    # expect: clean
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        bs = forward_batch.batch_size
        launch = _base_launch_kwargs(
            self, query, kv_cache, md.block_kv_indices, md.max_seq_len_k, layer
        )
        launch.update(dcp_launch_kwargs(md.global_seq_lens_k[:bs]))
        launch["seq_lens"] = md.seq_lens_k[:bs]
        raw_out, lse = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(**launch)
        return self._rank_local_state(raw_out, lse, md.seq_lens_k[:bs], layer, bs)


class _BoundLaunchBase(_DcpDecodeBase):
    """Binds the per-step launch arguments once in init_forward_metadata so
    the per-layer decode only supplies query / kv_cache / scale.  Graph
    capture/replay keeps the hoisted-metadata path."""

    _decode_launch = None
    _bound_local_lens = None

    def init_forward_metadata_out_graph(
        self, forward_batch: ForwardBatch, in_capture: bool = False
    ):
        self._decode_launch = None
        return super().init_forward_metadata_out_graph(
            forward_batch, in_capture=in_capture
        )

    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        if self._decode_launch is None:
            return self._dcp_decode_from_md(query, kv_cache, md, layer, forward_batch)
        raw_out, lse = self._decode_launch(
            query=query,
            kv_cache=kv_cache,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return self._rank_local_state(
            raw_out, lse, self._bound_local_lens, layer, forward_batch.batch_size
        )


class BoundLaunchCuteDslBackend(_BoundLaunchBase):

    # expect: SG203
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._decode_launch = None
        if not (
            get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode_or_idle()
        ):
            return
        md = self.forward_decode_metadata
        seq_lens = forward_batch.seq_lens.to(torch.int32)
        kwargs = dcp_launch_kwargs(seq_lens)
        self._decode_launch = partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=md.max_seq_len_k,
            **kwargs,
        )
        self._bound_local_lens = md.seq_lens_k


class BoundLocalLaunchCuteDslBackend(_BoundLaunchBase):

    # expect: clean
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        super().init_forward_metadata(forward_batch)
        self._decode_launch = None
        if not (
            get_parallel().dcp_enabled and forward_batch.forward_mode.is_decode_or_idle()
        ):
            return
        md = self.forward_decode_metadata
        # init_forward_metadata already split the views: seq_lens_k is this
        # rank's share, global_seq_lens_k the causal bound.
        self._decode_launch = partial(
            flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k,
            max_seq_len=md.max_seq_len_k,
            **dcp_launch_kwargs(md.global_seq_lens_k),
        )
        self._bound_local_lens = md.seq_lens_k


@dataclass
class DcpDecodeArgs:
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    causal_lens: torch.Tensor
    max_seq_len: int

    # expect: SG203
    @classmethod
    def from_batch(cls, backend, forward_batch: ForwardBatch) -> "DcpDecodeArgs":
        md = backend.forward_decode_metadata
        lens = forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)
        return cls(
            block_tables=md.block_kv_indices,
            seq_lens=lens,
            causal_lens=lens,
            max_seq_len=md.max_seq_len_k,
        )

    # expect: clean
    @classmethod
    def from_metadata(cls, md, bs: int) -> "DcpDecodeArgs":
        return cls(
            block_tables=md.block_kv_indices,
            seq_lens=md.seq_lens_k[:bs],
            causal_lens=md.global_seq_lens_k[:bs],
            max_seq_len=md.max_seq_len_k,
        )


def _launch_args(backend, args: DcpDecodeArgs, query, kv_cache, layer):
    parallel = get_parallel()
    return backend._run_decode_kernel(
        query=query,
        kv_cache=kv_cache,
        block_tables=args.block_tables,
        seq_lens=args.seq_lens,
        max_seq_len=args.max_seq_len,
        layer=layer,
        causal_seqs=args.causal_lens,
        cp_world=parallel.dcp_size,
        cp_rank=parallel.dcp_rank,
        return_lse=True,
    )


class ArgsFromBatchCuteDslBackend(_DcpDecodeBase):
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        args = DcpDecodeArgs.from_batch(self, forward_batch)
        raw_out, lse = _launch_args(self, args, query, kv_cache, layer)
        return self._rank_local_state(
            raw_out, lse, md.seq_lens_k[: forward_batch.batch_size], layer,
            forward_batch.batch_size,
        )


class ArgsFromMetadataCuteDslBackend(_DcpDecodeBase):
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        args = DcpDecodeArgs.from_metadata(md, forward_batch.batch_size)
        raw_out, lse = _launch_args(self, args, query, kv_cache, layer)
        return self._rank_local_state(
            raw_out, lse, args.seq_lens, layer, forward_batch.batch_size
        )


class MicroBatchCuteDslBackend(_DcpDecodeBase):
    """Splits the DCP decode into micro-batches to bound the cute-dsl split-KV
    workspace at large batch sizes."""

    # expect: SG203
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        step = max(1, flags.DCP_DECODE_MICRO_BS)
        outs, lses = [], []
        for start in range(0, bs, step):
            end = min(start + step, bs)
            lens = forward_batch.seq_lens[start:end]
            raw_out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices[start:end],
                seq_lens=lens,
                max_seq_len=md.max_seq_len_k,
                layer=layer,
                causal_seqs=lens,
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._rank_local_state(
            torch.cat(outs), torch.cat(lses), md.seq_lens_k[:bs], layer, bs
        )


class MicroBatchLocalCuteDslBackend(_DcpDecodeBase):
    # expect: clean
    def _dcp_decode(self, query, kv_cache, md, layer, forward_batch):
        parallel = get_parallel()
        bs = forward_batch.batch_size
        step = max(1, flags.DCP_DECODE_MICRO_BS)
        local_all = md.seq_lens_k[:bs]
        global_all = md.global_seq_lens_k[:bs]
        outs, lses = [], []
        for start in range(0, bs, step):
            end = min(start + step, bs)
            raw_out, lse = self._run_decode_kernel(
                query=query[start:end],
                kv_cache=kv_cache,
                block_tables=md.block_kv_indices[start:end],
                seq_lens=local_all[start:end],
                max_seq_len=md.max_seq_len_k,
                layer=layer,
                causal_seqs=global_all[start:end],
                cp_world=parallel.dcp_size,
                cp_rank=parallel.dcp_rank,
                return_lse=True,
            )
            outs.append(raw_out)
            lses.append(lse)
        return self._rank_local_state(
            torch.cat(outs), torch.cat(lses), local_all, layer, bs
        )
