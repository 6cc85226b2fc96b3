"""Direct launches of FlashInfer's ``trtllm_batch_decode_with_kv_cache_mla``
for DCP decode / verify, configured from frozen settings."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch

from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.utils import is_flashinfer_available

from blindsg40.config.settings import DcpSettings
from blindsg40.dcp.lens import DcpLens, int32, local_max, to_local

if is_flashinfer_available():
    import flashinfer


@dataclass(frozen=True)
class MlaDims:
    qk_nope_head_dim: int
    kv_lora_rank: int
    qk_rope_head_dim: int

    @classmethod
    def from_model_config(cls, model_config: Any) -> "MlaDims":
        return cls(
            qk_nope_head_dim=model_config.qk_nope_head_dim,
            kv_lora_rank=model_config.kv_lora_rank,
            qk_rope_head_dim=model_config.qk_rope_head_dim,
        )


@dataclass(frozen=True)
class LaunchSettings:
    dcp: DcpSettings
    dims: MlaDims

    @classmethod
    def from_server_args(cls, server_args: Any, model_config: Any) -> "LaunchSettings":
        return cls(
            dcp=DcpSettings.from_server_args(server_args),
            dims=MlaDims.from_model_config(model_config),
        )


def mla_decode(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    workspace: torch.Tensor,
    dims: MlaDims,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    bmm1_scale: float,
    **kwargs,
):
    return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
        query=query,
        kv_cache=kv_cache,
        workspace_buffer=workspace,
        qk_nope_head_dim=dims.qk_nope_head_dim,
        kv_lora_rank=dims.kv_lora_rank,
        qk_rope_head_dim=dims.qk_rope_head_dim,
        block_tables=block_tables,
        seq_lens=int32(seq_lens),
        max_seq_len=max_seq_len,
        bmm1_scale=bmm1_scale,
        **kwargs,
    )


class GlobalKernelLensMixin:
    def _kernel_seq_lens(self, forward_batch) -> torch.Tensor:
        return forward_batch.seq_lens[: forward_batch.batch_size].to(torch.int32)


class LocalKernelLensMixin:
    def _kernel_seq_lens(self, forward_batch) -> torch.Tensor:
        return to_local(forward_batch.seq_lens[: forward_batch.batch_size], self.dcp)


class DcpMlaLauncher:
    """Owns the workspace and the DCP layout; builds page tables through the
    backend's rank-local filler (``_fill_dcp_block_kv_indices``)."""

    def __init__(self, settings: LaunchSettings, workspace: torch.Tensor, backend: Any):
        self.dcp = settings.dcp
        self.dims = settings.dims
        self.workspace = workspace
        self.backend = backend
        self._localize = functools.partial(
            get_dcp_lens, dcp_size=settings.dcp.size, dcp_rank=settings.dcp.rank
        )
        self._cute_dcp = functools.partial(
            mla_decode,
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=settings.dcp.size,
            cp_rank=settings.dcp.rank,
            return_lse=True,
        )

    @classmethod
    def from_server_args(cls, server_args, model_config, workspace, backend):
        return cls(LaunchSettings.from_server_args(server_args, model_config), workspace, backend)

    def _local_table(self, forward_batch, local_lens: torch.Tensor, max_blocks: int) -> torch.Tensor:
        bs = forward_batch.batch_size
        table = torch.full((bs, max_blocks), -1, dtype=torch.int32, device=local_lens.device)
        self.backend._fill_dcp_block_kv_indices(
            table, forward_batch.req_pool_indices[:bs], local_lens
        )
        return table

    # expect: clean
    def decode_single_token(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        assert query.dim() == 3, "single-token decode only"
        local_lens = to_local(forward_batch.seq_lens[: forward_batch.batch_size], self.dcp)
        table = self._local_table(forward_batch, local_lens, max_blocks)
        return mla_decode(
            query, kv_cache, self.workspace, self.dims, table, local_lens,
            local_max(max_seq_len, self.dcp), scale,
            backend="trtllm-gen", return_lse=True,
        )

    # expect: SG203
    def verify_multi_token(self, query, kv_cache, forward_batch, num_draft_tokens, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        query = query.view(bs, num_draft_tokens, *query.shape[1:])
        verify_lens = forward_batch.seq_lens[:bs] + num_draft_tokens
        local_lens = to_local(verify_lens, self.dcp)
        table = self._local_table(forward_batch, local_lens, max_blocks)
        return mla_decode(
            query, kv_cache, self.workspace, self.dims, table, local_lens,
            local_max(max_seq_len + num_draft_tokens, self.dcp), scale,
            backend="trtllm-gen", return_lse=True,
        )

    # expect: SG203
    def verify_bound(self, query, kv_cache, forward_batch, num_draft_tokens, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        query = query.view(bs, num_draft_tokens, *query.shape[1:])
        lens = DcpLens.from_global(
            forward_batch.seq_lens[:bs] + num_draft_tokens, max_seq_len + num_draft_tokens, self.dcp
        )
        table = self._local_table(forward_batch, lens.local_lens, max_blocks)
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, table, lens.local_lens,
            lens.max_local, scale,
            causal_seqlens_kv_global=lens.local_lens,
        )

    # expect: SG203
    def decode_relocalized(self, query, kv_cache, metadata, forward_batch, scale):
        # metadata comes from TRTLLMMLABackend.init_forward_metadata under DCP.
        bs = forward_batch.batch_size
        kernel_lens = self._localize(metadata.seq_lens_k[:bs]).to(torch.int32)
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, metadata.block_kv_indices,
            kernel_lens, metadata.max_seq_len_k, scale,
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
        )

    # expect: SG203
    def decode_per_request(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        global_list = forward_batch.seq_lens_cpu[:bs].tolist()
        local_list = []
        for length in global_list:
            local_list.append(length // self.dcp.size + int(self.dcp.rank < length % self.dcp.size))
        device = forward_batch.seq_lens.device
        local_lens = torch.tensor(local_list, dtype=torch.int32, device=device)
        global_lens = torch.tensor(global_list, dtype=torch.int32, device=device)
        table = self._local_table(forward_batch, local_lens, max_blocks)
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, table, global_lens,
            local_max(max_seq_len, self.dcp), scale,
            causal_seqlens_kv_global=global_lens,
        )

    # expect: SG203
    def decode_with_closure(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = to_local(global_lens, self.dcp)

        def launch(kernel_lens: torch.Tensor):
            table = self._local_table(forward_batch, local_lens, max_blocks)
            return self._cute_dcp(
                query, kv_cache, self.workspace, self.dims, table, kernel_lens,
                local_max(max_seq_len, self.dcp), scale,
                causal_seqlens_kv_global=global_lens,
            )

        return launch(global_lens)

    # expect: clean
    def decode_with_closure_local(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = to_local(global_lens, self.dcp)

        def launch(kernel_lens: torch.Tensor):
            table = self._local_table(forward_batch, kernel_lens, max_blocks)
            return self._cute_dcp(
                query, kv_cache, self.workspace, self.dims, table, kernel_lens,
                local_max(max_seq_len, self.dcp), scale,
                causal_seqlens_kv_global=global_lens,
            )

        return launch(local_lens)

    # expect: SG203
    def decode_from_kwargs(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        lens = DcpLens.from_global(forward_batch.seq_lens[:bs], max_seq_len, self.dcp)
        launch_kwargs: Dict[str, Any] = {
            "block_tables": self._local_table(forward_batch, lens.local_lens, max_blocks),
            "seq_lens": lens.global_lens,
            "max_seq_len": lens.max_local,
            "causal_seqlens_kv_global": lens.global_lens,
        }
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, bmm1_scale=scale, **launch_kwargs
        )

    # expect: clean
    def decode_from_kwargs_local(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        lens = DcpLens.from_global(forward_batch.seq_lens[:bs], max_seq_len, self.dcp)
        launch_kwargs: Dict[str, Any] = {
            "block_tables": self._local_table(forward_batch, lens.local_lens, max_blocks),
            "seq_lens": lens.local_lens,
            "max_seq_len": lens.max_local,
            "causal_seqlens_kv_global": lens.global_lens,
        }
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, bmm1_scale=scale, **launch_kwargs
        )

    # expect: clean
    def decode_maybe_dcp(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if not self.dcp.enabled:
            table = self.backend._create_block_kv_indices(
                forward_batch.kv_loc_plan,
                bs,
                max_blocks,
                forward_batch.req_pool_indices,
                global_lens,
                global_lens.device,
            )
            return mla_decode(
                query, kv_cache, self.workspace, self.dims, table, global_lens,
                max_seq_len, scale, backend="trtllm-gen",
            )
        local_lens = to_local(global_lens, self.dcp)
        table = self._local_table(forward_batch, local_lens, max_blocks)
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, table, local_lens,
            local_max(max_seq_len, self.dcp), scale,
            causal_seqlens_kv_global=global_lens,
        )


class MixinLensLauncher(GlobalKernelLensMixin, DcpMlaLauncher):
    # expect: SG203
    def decode(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        table = self._local_table(forward_batch, to_local(global_lens, self.dcp), max_blocks)
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, table,
            self._kernel_seq_lens(forward_batch),
            local_max(max_seq_len, self.dcp), scale,
            causal_seqlens_kv_global=global_lens,
        )


class MixinLocalLensLauncher(LocalKernelLensMixin, DcpMlaLauncher):
    # expect: clean
    def decode(self, query, kv_cache, forward_batch, max_blocks, max_seq_len, scale):
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        kernel_lens = self._kernel_seq_lens(forward_batch)
        table = self._local_table(forward_batch, kernel_lens, max_blocks)
        return self._cute_dcp(
            query, kv_cache, self.workspace, self.dims, table, kernel_lens,
            local_max(max_seq_len, self.dcp), scale,
            causal_seqlens_kv_global=global_lens,
        )
