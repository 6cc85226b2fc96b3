"""Speculative-decoding launchers over the cute-dsl DCP MLA kernel.

``_kernel`` is the single launch point: with DCP it calls
``trtllm_batch_decode_with_kv_cache_mla(backend="cute-dsl", enable_dcp=True,
cp_world, cp_rank, causal_seqlens_kv_global=...)`` and expects ``seq_lens`` to
be this rank's share.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Optional

import torch

from sglang.srt.distributed.parallel_state import get_dcp_group
from sglang.srt.environ import envs
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.dcp.layout import get_dcp_chain_spec_lens, get_dcp_lens
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import is_flashinfer_available

from blindsg35.kernels.dcp_view import DcpView
from blindsg35.kernels.lens import (
    draft_extend_kv_lens,
    rank_local_lens,
    split_kv_lens,
    verify_kv_lens,
)

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class DcpSpecLauncher:
    def __init__(self, backend: CuteDslMLABackend, server_args: ServerArgs):
        self.backend = backend
        self.view = DcpView.from_server_args(server_args)
        self.num_draft_tokens = server_args.speculative_num_draft_tokens or 1

    # ------------------------------------------------------------------
    # the launch
    # ------------------------------------------------------------------
    def _kernel(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
        *,
        causal_global: Optional[torch.Tensor] = None,
    ):
        b = self.backend
        dcp_kwargs = {}
        if self.view.enabled:
            dcp_kwargs = dict(
                enable_dcp=True,
                cp_world=self.view.size,
                cp_rank=self.view.rank,
                causal_seqlens_kv_global=causal_global.to(torch.int32).contiguous(),
                return_lse=True,
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=b.workspace_buffer,
            qk_nope_head_dim=b.qk_nope_head_dim,
            kv_lora_rank=b.kv_lora_rank,
            qk_rope_head_dim=b.qk_rope_head_dim,
            block_tables=block_tables,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=max_seq_len,
            bmm1_scale=b._compute_decode_bmm1_scale(layer),
            skip_softmax_threshold_scale_factor=envs.SGLANG_SKIP_SOFTMAX_DECODE_THRESHOLD_SCALE_FACTOR.get(),
            backend="cute-dsl",
            **dcp_kwargs,
        )

    # ------------------------------------------------------------------
    # per-mode length rules (getattr-dispatched by forward mode name)
    # ------------------------------------------------------------------
    def _global_lens_decode(self, fb: "ForwardBatch") -> torch.Tensor:
        return fb.seq_lens.to(torch.int32)

    def _global_lens_target_verify(self, fb: "ForwardBatch") -> torch.Tensor:
        return verify_kv_lens(fb.seq_lens, self.num_draft_tokens)

    def _global_lens_draft_extend_v2(self, fb: "ForwardBatch") -> torch.Tensor:
        return draft_extend_kv_lens(
            fb.seq_lens, fb.extend_seq_lens, max(fb.extend_seq_lens_cpu)
        )

    def _local_lens_decode(self, fb: "ForwardBatch") -> torch.Tensor:
        return rank_local_lens(self._global_lens_decode(fb), self.view)

    def _local_lens_target_verify(self, fb: "ForwardBatch") -> torch.Tensor:
        return rank_local_lens(self._global_lens_target_verify(fb), self.view)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: SG203
    def launch(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        mode = forward_batch.forward_mode.name.lower()
        global_fn: Callable = getattr(self, f"_global_lens_{mode}")
        local_fn: Callable = getattr(
            self, f"_local_lens_{mode}", lambda fb: fb.seq_lens.to(torch.int32)
        )
        return self._kernel(
            query,
            kv_cache,
            block_tables,
            local_fn(forward_batch),
            max_seq_len,
            layer,
            causal_global=global_fn(forward_batch),
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: SG203
    def launch_decode(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        try:
            # Host-side split avoids a device kernel per step.
            local = get_dcp_lens(
                forward_batch.seq_lens_cpu, self.view.size, self.view.rank
            ).to(device=query.device, dtype=torch.int32, non_blocking=True)
        except (AttributeError, TypeError):
            # seq_lens_cpu is not published for needs_cpu_seq_lens=False backends.
            local = forward_batch.seq_lens.to(torch.int32)
        return self._kernel(
            query,
            kv_cache,
            block_tables,
            local,
            max_seq_len,
            layer,
            causal_global=forward_batch.seq_lens,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft extend)
    # expect: SG203
    def launch_draft_extend(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        layer: "RadixAttention",
    ):
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        lens = split_kv_lens(
            draft_extend_kv_lens(
                forward_batch.seq_lens, forward_batch.extend_seq_lens, max_seq_len_q
            ),
            self.view,
            int(forward_batch.seq_lens_cpu.max()) if forward_batch.seq_lens_cpu is not None
            else self.backend.max_context_len,
        )
        bs = forward_batch.batch_size
        query = query.view(bs, max_seq_len_q, *query.shape[-2:])
        return self._kernel(
            query,
            kv_cache,
            block_tables,
            lens.kv,
            lens.max_local,
            layer,
            causal_global=lens.kv,
        )

    # idiom: sglang/srt/layers/dcp/layout.py get_dcp_chain_spec_lens (hardware_backend/npu ascend_backend._get_kv_lens_and_block_tables)
    # expect: SG203
    def launch_verify_chain(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        """Chain verify as bs * num_draft_tokens single-token rows, each with
        its own causal frontier."""
        ndt = self.num_draft_tokens
        total = verify_kv_lens(forward_batch.seq_lens, ndt)
        steps = torch.arange(1, ndt + 1, dtype=total.dtype, device=total.device)
        row_frontier = (total.unsqueeze(1) - ndt + steps).clamp_(min=0).reshape(-1)
        rows = query.view(-1, 1, *query.shape[-2:])
        return self._kernel(
            rows,
            kv_cache,
            block_tables.repeat_interleave(ndt, dim=0),
            row_frontier,
            max_seq_len,
            layer,
            causal_global=row_frontier,
        )


class StrictDcpSpecLauncher(DcpSpecLauncher):
    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel
    # expect: clean
    def launch(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        mode = forward_batch.forward_mode.name.lower()
        local_fn = getattr(self, f"_local_lens_{mode}", None)
        global_fn = getattr(self, f"_global_lens_{mode}", None)
        if local_fn is None or global_fn is None:
            raise NotImplementedError(f"no DCP length rule for forward mode {mode}")
        return self._kernel(
            query,
            kv_cache,
            block_tables,
            local_fn(forward_batch),
            max_seq_len,
            layer,
            causal_global=global_fn(forward_batch),
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._forward_decode_dcp
    # expect: clean
    def launch_decode(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        try:
            local = get_dcp_lens(
                forward_batch.seq_lens_cpu, self.view.size, self.view.rank
            ).to(device=query.device, dtype=torch.int32, non_blocking=True)
        except (AttributeError, TypeError):
            # No host mirror: split on device instead.
            local = get_dcp_lens(
                forward_batch.seq_lens, self.view.size, self.view.rank
            ).to(torch.int32)
        return self._kernel(
            query,
            kv_cache,
            block_tables,
            local,
            max_seq_len,
            layer,
            causal_global=forward_batch.seq_lens,
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.init_forward_metadata (draft extend)
    # expect: clean
    def launch_draft_extend(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        layer: "RadixAttention",
    ):
        max_seq_len_q = max(forward_batch.extend_seq_lens_cpu)
        lens = split_kv_lens(
            draft_extend_kv_lens(
                forward_batch.seq_lens, forward_batch.extend_seq_lens, max_seq_len_q
            ),
            self.view,
            int(forward_batch.seq_lens_cpu.max()) if forward_batch.seq_lens_cpu is not None
            else self.backend.max_context_len,
        )
        bs = forward_batch.batch_size
        query = query.view(bs, max_seq_len_q, *query.shape[-2:])
        return self._kernel(
            query,
            kv_cache,
            block_tables,
            lens.kv_local,
            lens.max_local,
            layer,
            causal_global=lens.kv,
        )

    # idiom: sglang/srt/layers/dcp/layout.py get_dcp_chain_spec_lens (hardware_backend/npu ascend_backend._get_kv_lens_and_block_tables)
    # expect: clean
    def launch_verify_chain(
        self,
        forward_batch: "ForwardBatch",
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        block_tables: torch.Tensor,
        max_seq_len: int,
        layer: "RadixAttention",
    ):
        ndt = self.num_draft_tokens
        group_view = DcpView.from_group(get_dcp_group()) if self.view.enabled else DcpView()
        total = verify_kv_lens(forward_batch.seq_lens, ndt)
        # Request-major local frontier of every draft row (this rank's share).
        local_rows = get_dcp_chain_spec_lens(total, ndt, group_view.size, group_view.rank)
        steps = torch.arange(1, ndt + 1, dtype=total.dtype, device=total.device)
        global_rows = (total.unsqueeze(1) - ndt + steps).clamp_(min=0).reshape(-1)
        rows = query.view(-1, 1, *query.shape[-2:])
        return self._kernel(
            rows,
            kv_cache,
            block_tables.repeat_interleave(ndt, dim=0),
            local_rows,
            max_seq_len,
            layer,
            causal_global=global_rows,
        )
