"""trtllm_mla variants whose DCP decode reads its lengths through the fork's
helpers (a lengths provider object, properties, views, launch records)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

from blindsg19.common.dcp_lens import (
    KVLensProvider,
    MLADecodeLaunch,
    dcp_local_view,
    rank_local_lens,
)
from sglang.kernels.ops.attention.fixup_zero_kv import fixup_zero_kv_rows
from sglang.kernels.ops.attention.utils import concat_mla_absorb_q_general
from sglang.srt.layers.attention.trtllm_mla_backend import (
    TRTLLMMLABackend,
    TRTLLMMLADecodeMetadata,
)
from sglang.srt.mem_cache.layout.paged_view import paged_row_view
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils import is_flashinfer_available

if is_flashinfer_available():
    import flashinfer

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch
    from sglang.srt.model_executor.model_runner import ModelRunner


def _finish_dcp(backend, raw_out, lse, local_lens, layer, bs):
    out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
    lse = lse.view(-1, layer.tp_q_head_num)
    fixup_zero_kv_rows(out, lse, local_lens, backend.q_indptr_decode[: bs + 1], 1)
    return out.flatten(1), lse


class ProviderTRTLLMMLABackend(TRTLLMMLABackend):
    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.lens_provider = KVLensProvider(num_draft_tokens=self.num_draft_tokens or 0)

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        kv_lens = self.lens_provider.for_kernel(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kv_lens, layer, bs)


class LocalProviderTRTLLMMLABackend(ProviderTRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        kv_lens = self.lens_provider.local_for_kernel(forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=kv_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, kv_lens, layer, bs)


class PropertyLensTRTLLMMLABackend(TRTLLMMLABackend):
    """Binds the batch on the backend for the per-layer helpers."""

    _bound_batch: Optional["ForwardBatch"] = None

    @property
    def _kernel_seq_lens(self) -> torch.Tensor:
        fb = self._bound_batch
        return fb.seq_lens[: fb.batch_size].to(torch.int32)

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        self._bound_batch = forward_batch
        bs = forward_batch.batch_size
        raw_out, lse = self._run_decode_kernel(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            seq_lens=self._kernel_seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class ClosureTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size

        def _launch(lens: torch.Tensor):
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )

        lens = forward_batch.seq_lens[:bs]
        raw_out, lse = _launch(lens.to(torch.int32))
        return _finish_dcp(self, raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class ClosureLocalTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size

        def _launch(lens: torch.Tensor):
            return self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=lens,
                max_seq_len=metadata.max_seq_len_k,
                layer=layer,
                return_lse=True,
            )

        lens = rank_local_lens(forward_batch.seq_lens[:bs])
        raw_out, lse = _launch(lens)
        return _finish_dcp(self, raw_out, lse, lens, layer, bs)


class ViewTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        with dcp_local_view(forward_batch) as view:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=forward_batch.seq_lens[: view.batch_size],
                max_seq_len=view.max_seq_len,
                layer=layer,
                return_lse=True,
            )
            return _finish_dcp(
                self, raw_out, lse, view.seq_lens, layer, view.batch_size
            )


class ViewLocalTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        with dcp_local_view(forward_batch) as view:
            raw_out, lse = self._run_decode_kernel(
                query=query,
                kv_cache=kv_cache,
                block_tables=metadata.block_kv_indices,
                seq_lens=view.seq_lens,
                max_seq_len=view.max_seq_len,
                layer=layer,
                return_lse=True,
            )
            return _finish_dcp(
                self, raw_out, lse, view.seq_lens, layer, view.batch_size
            )


class DataclassLaunchTRTLLMMLABackend(TRTLLMMLABackend):
    """Builds an MLADecodeLaunch record (also dumped by the kernel replayer)."""

    # expect: SG203
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        launch = MLADecodeLaunch.from_batch(query, kv_cache, metadata, forward_batch)
        raw_out, lse = self._run_decode_kernel(
            query=launch.query,
            kv_cache=launch.kv_cache,
            block_tables=launch.block_tables,
            seq_lens=launch.seq_lens,
            max_seq_len=launch.max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, metadata.seq_lens_k[:bs], layer, bs)


class DataclassLaunchLocalTRTLLMMLABackend(TRTLLMMLABackend):
    # expect: clean
    def _forward_decode_dcp(
        self,
        query: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: TRTLLMMLADecodeMetadata,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
    ):
        bs = forward_batch.batch_size
        launch = MLADecodeLaunch.from_batch_local(
            query, kv_cache, metadata, forward_batch
        )
        raw_out, lse = self._run_decode_kernel(
            query=launch.query,
            kv_cache=launch.kv_cache,
            block_tables=launch.block_tables,
            seq_lens=launch.seq_lens,
            max_seq_len=launch.max_seq_len,
            layer=layer,
            return_lse=True,
        )
        return _finish_dcp(self, raw_out, lse, launch.seq_lens, layer, bs)


class NoDCPFastMLABackend(TRTLLMMLABackend):
    """Lean bf16 decode for single-rank-KV deployments."""

    def __init__(self, model_runner: "ModelRunner", *args, **kwargs):
        if get_parallel().dcp_enabled:
            raise ValueError(
                "NoDCPFastMLABackend does not shard the KV cache; "
                "use trtllm_mla or cutedsl_mla with --dcp-size > 1"
            )
        super().__init__(model_runner, *args, **kwargs)

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        query = concat_mla_absorb_q_general(
            q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
        ).unsqueeze(1)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
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


class SharedDecodeVerifyMLABackend(TRTLLMMLABackend):
    """One decode entry for plain decode and (historically) chain verify."""

    # expect: clean
    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: "RadixAttention",
        forward_batch: "ForwardBatch",
        save_kv_cache: bool = True,
        q_rope: Optional[torch.Tensor] = None,
        k_rope: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        is_neox: Optional[bool] = False,
        llama_4_scaling: Optional[torch.Tensor] = None,
    ):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        # Chain verify, from when the model routed TARGET_VERIFY here.
        if save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(
                layer, KVWriteLoc.for_batch(forward_batch), k, k_rope
            )
        metadata = forward_batch.decode_trtllm_mla_metadata
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        query = concat_mla_absorb_q_general(
            q.view(-1, layer.tp_q_head_num, layer.v_head_dim),
            q_rope.view(-1, layer.tp_q_head_num, layer.head_dim - layer.v_head_dim),
        ).view(bs, ndt, layer.tp_q_head_num, layer.head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        kv_cache = paged_row_view(k_cache, self.page_size).unsqueeze(1)
        dcp = get_parallel().dcp_enabled
        seq_lens = metadata.seq_lens_k if dcp else forward_batch.seq_lens + ndt
        raw_out = flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query,
            kv_cache=kv_cache,
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens.to(torch.int32),
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        if dcp:
            raw_out, lse = raw_out
            out = raw_out.view(-1, layer.tp_q_head_num, layer.v_head_dim)
            return out.flatten(1), lse.view(-1, layer.tp_q_head_num)
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)
