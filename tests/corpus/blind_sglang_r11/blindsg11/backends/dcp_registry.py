"""DCP decode with a per-kernel launcher table.

``SGLANG_DCP_DECODE_KERNEL`` picks the kernel (cute-dsl by default; trtllm-gen
for single-token decode on clusters without the cute-dsl wheel).
"""

from __future__ import annotations

import os
from typing import Callable, ClassVar, Dict

import torch

from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLABackend
from sglang.srt.runtime_context import get_parallel

from blindsg11.util.mla_inputs import MlaDecodeInputsMixin


class RegistryDcpBackend(MlaDecodeInputsMixin, CuteDslMLABackend):
    @staticmethod
    def _launch_cute_dsl(backend, query, kv_cache, md, layer, lens, causal):
        parallel = get_parallel()
        return backend._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=md.block_kv_indices,
            seq_lens=lens,
            max_seq_len=md.max_seq_len_k,
            layer=layer,
            causal_seqs=causal,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    @staticmethod
    def _launch_trtllm_gen(backend, query, kv_cache, md, layer, lens, causal):
        # trtllm-gen ignores the causal bound (single-token decode only).
        return TRTLLMMLABackend._run_decode_kernel(
            backend,
            query,
            kv_cache,
            md.block_kv_indices,
            lens,
            md.max_seq_len_k,
            layer,
            return_lse=True,
        )

    _LAUNCHERS: ClassVar[Dict[str, Callable]] = {
        "cute-dsl": _launch_cute_dsl,
        "trtllm-gen": _launch_trtllm_gen,
    }

    @property
    def decode_kernel_name(self) -> str:
        return os.environ.get("SGLANG_DCP_DECODE_KERNEL", "cute-dsl")

    def _finish(self, raw_out, lse, layer, local_lens, bs):
        output = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        lse = lse.view(-1, layer.tp_q_head_num)
        fixup_zero_kv_rows(output, lse, local_lens, self.q_indptr_decode[: bs + 1], 1)
        return output.flatten(1), lse

    # expect: SG203
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        launcher = self._LAUNCHERS[self.decode_kernel_name]
        # Launchers take the batch lengths; cp_rank tells the kernel which
        # interleaved slice this rank owns.
        lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = launcher(self, query, kv_cache, md, layer, lens, lens)
        return self._finish(raw_out, lse, layer, lens, bs)


class RegistryLocalDcpBackend(RegistryDcpBackend):
    # expect: clean
    def forward_decode(
        self,
        q,
        k,
        v,
        layer,
        forward_batch,
        save_kv_cache=True,
        q_rope=None,
        k_rope=None,
        cos_sin_cache=None,
        is_neox=False,
        llama_4_scaling=None,
    ):
        if not get_parallel().dcp_enabled:
            return CuteDslMLABackend.forward_decode(
                self, q, k, v, layer, forward_batch, save_kv_cache, q_rope,
                k_rope, cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_inputs(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        md = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        launcher = self._LAUNCHERS[self.decode_kernel_name]
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = launcher(self, query, kv_cache, md, layer, local_lens, global_lens)
        return self._finish(raw_out, lse, layer, local_lens, bs)
