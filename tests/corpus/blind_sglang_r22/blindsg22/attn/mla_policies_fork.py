"""cutedsl_mla variants where the KV lengths travel through fork policy:
generators, properties, class attributes, env vars, config objects, early
returns, keyword dicts and closures."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import torch

from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla
from sglang.srt.layers.attention.cutedsl_mla_backend import CuteDslMLABackend
from sglang.srt.layers.attention.trtllm_mla_backend import TRTLLMMLADecodeMetadata
from sglang.srt.layers.dcp import get_dcp_lens, update_local_kv_lens_for_dcp
from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel

from blindsg22.attn.mla_common import build_mla_query, finish_dcp_decode, mla_kv_cache
from blindsg22.common.config import (
    DEFAULT_MLA_CONFIG,
    REFUSING_MLA_CONFIG,
    dcp_lens_helper_from_env,
    dcp_local_lens_from_env,
)
from blindsg22.common.lens import iter_layer_lens

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.model_runner import ModelRunner

StateOut = Tuple[torch.Tensor, torch.Tensor]


class ForkPolicyCuteDslMLABackend(CuteDslMLABackend):
    """DCP decode entry points; lengths picked by fork policy."""

    # Which metadata buffer the decode walks.
    KV_LENS_FIELD = "global_seq_lens_k"
    LOCAL_KV_LENS_FIELD = "seq_lens_k"

    def __init__(
        self,
        model_runner: ModelRunner,
        skip_prefill: bool = False,
        kv_indptr_buf: Optional[torch.Tensor] = None,
        q_indptr_decode_buf: Optional[torch.Tensor] = None,
    ):
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, q_indptr_decode_buf)
        # --decode-context-parallel-size as launched.
        self.dcp_size_arg = model_runner.server_args.dcp_size

    def _metadata(self, forward_batch: ForwardBatch) -> TRTLLMMLADecodeMetadata:
        return (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )

    def _launch_dcp(
        self,
        query: torch.Tensor,
        layer: RadixAttention,
        metadata: TRTLLMMLADecodeMetadata,
        seq_lens: torch.Tensor,
        causal_seqs: torch.Tensor,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        parallel = get_parallel()
        return self._run_decode_kernel(
            query=query,
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
            causal_seqs=causal_seqs,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # ------------------------------------------------------------------
    # Generator over layers (fused MTP decode of several layers' queries).
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend (one launch per layer), lens from a generator
    # expect: SG203
    def forward_decode_layers(
        self,
        queries: List[torch.Tensor],
        layers: List[RadixAttention],
        forward_batch: ForwardBatch,
    ) -> List[StateOut]:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        results: List[StateOut] = []
        for layer_idx, lens in iter_layer_lens(global_lens, len(layers), localize=False):
            layer = layers[layer_idx]
            raw_out, lse = self._launch_dcp(
                queries[layer_idx], layer, metadata, lens, global_lens
            )
            results.append(
                finish_dcp_decode(
                    raw_out, lse, lens, self.q_indptr_decode[: bs + 1], layer
                )
            )
        return results

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLAMultiStepDraftBackend (one launch per layer), generator localizes with layers/dcp/layout.py get_dcp_lens
    # expect: clean
    def forward_decode_layers_local(
        self,
        queries: List[torch.Tensor],
        layers: List[RadixAttention],
        forward_batch: ForwardBatch,
    ) -> List[StateOut]:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        results: List[StateOut] = []
        for layer_idx, lens in iter_layer_lens(global_lens, len(layers), localize=True):
            layer = layers[layer_idx]
            raw_out, lse = self._launch_dcp(
                queries[layer_idx], layer, metadata, lens, global_lens
            )
            results.append(
                finish_dcp_decode(
                    raw_out, lse, lens, self.q_indptr_decode[: bs + 1], layer
                )
            )
        return results

    # ------------------------------------------------------------------
    # Properties.
    # ------------------------------------------------------------------

    @property
    def kv_seq_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.global_seq_lens_k

    @property
    def local_kv_seq_lens(self) -> torch.Tensor:
        return self.forward_decode_metadata.seq_lens_k

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (lens read through a property of forward_decode_metadata)
    # expect: SG203
    def forward_decode_via_property(
        self, q: torch.Tensor, q_rope: torch.Tensor, layer: RadixAttention, bs: int
    ) -> StateOut:
        metadata = self.forward_decode_metadata
        seq_lens = self.kv_seq_lens[:bs]
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1),
            layer,
            metadata,
            seq_lens,
            metadata.global_seq_lens_k[:bs],
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (rank-local seq_lens_k read through a property)
    # expect: clean
    def forward_decode_via_local_property(
        self, q: torch.Tensor, q_rope: torch.Tensor, layer: RadixAttention, bs: int
    ) -> StateOut:
        metadata = self.forward_decode_metadata
        seq_lens = self.local_kv_seq_lens[:bs]
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1),
            layer,
            metadata,
            seq_lens,
            metadata.global_seq_lens_k[:bs],
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # ------------------------------------------------------------------
    # Class attributes naming the metadata field.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLADecodeMetadata field picked by a class attribute
    # expect: SG203
    def forward_decode_by_field(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = getattr(metadata, self.KV_LENS_FIELD)[:bs]
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1),
            layer,
            metadata,
            seq_lens,
            metadata.global_seq_lens_k[:bs],
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLADecodeMetadata field picked by a class attribute (seq_lens_k)
    # expect: clean
    def forward_decode_by_local_field(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = getattr(metadata, self.LOCAL_KV_LENS_FIELD)[:bs]
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1),
            layer,
            metadata,
            seq_lens,
            metadata.global_seq_lens_k[:bs],
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # ------------------------------------------------------------------
    # Environment switches.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (localization behind an env switch)
    # expect: SG203
    def forward_decode_env(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if dcp_local_lens_from_env():
            seq_lens = self._get_dcp_local_seq_lens(global_lens)
        else:
            seq_lens = global_lens
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1), layer, metadata, seq_lens, global_lens
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/dcp/layout.py get_dcp_lens vs TRTLLMMLABackend._get_dcp_local_seq_lens chosen by an env switch
    # expect: clean
    def forward_decode_env_helper(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if dcp_lens_helper_from_env() == "layout":
            seq_lens = get_dcp_lens(
                global_lens, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
        else:
            seq_lens = self._get_dcp_local_seq_lens(global_lens)
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1), layer, metadata, seq_lens, global_lens
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # ------------------------------------------------------------------
    # Config objects.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (localization behind a config object)
    # expect: SG203
    def forward_decode_config(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        cfg = DEFAULT_MLA_CONFIG
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        seq_lens = (
            self._get_dcp_local_seq_lens(global_lens) if cfg.localize_lens else global_lens
        )
        raw_out, lse = self._launch_dcp(
            build_mla_query(q, q_rope, layer, 1), layer, metadata, seq_lens, global_lens
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend._run_decode_kernel refusal, driven by a config object and server_args.dcp_size (DCP refused early)
    # expect: clean
    def forward_decode_config_refusing(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> torch.Tensor:
        cfg = REFUSING_MLA_CONFIG
        if cfg.refuse_dcp and self.dcp_size_arg > 1:
            raise NotImplementedError("this fork's MLA decode does not support DCP")
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        raw_out = self._run_decode_kernel(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=forward_batch.seq_lens[:bs],
            max_seq_len=metadata.max_seq_len_k,
            layer=layer,
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # ------------------------------------------------------------------
    # Early return, then a direct flashinfer launch.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (non-DCP early return) + _run_decode_kernel inlined as a direct trtllm_batch_decode_with_kv_cache_mla call
    # expect: SG203
    def forward_decode_inline(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: torch.Tensor = None,
        k_rope: torch.Tensor = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=seq_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=seq_lens,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, seq_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend.forward_decode (non-DCP early return) + inlined cute-dsl DCP launch, lens via update_local_kv_lens_for_dcp
    # expect: clean
    def forward_decode_inline_local(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
        save_kv_cache: bool = True,
        q_rope: torch.Tensor = None,
        k_rope: torch.Tensor = None,
    ):
        parallel = get_parallel()
        if not parallel.dcp_enabled:
            return super().forward_decode(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope
            )
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        local_lens = global_lens.clone()
        update_local_kv_lens_for_dcp(local_lens)
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out, lse, local_lens, self.q_indptr_decode[: bs + 1], layer
        )

    # ------------------------------------------------------------------
    # Keyword dicts.
    # ------------------------------------------------------------------

    def _base_launch_kwargs(self, layer: RadixAttention) -> dict:
        parallel = get_parallel()
        return dict(
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            return_lse=True,
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (launch arguments assembled in a dict)
    # expect: SG203
    def forward_decode_kwargs(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        launch_kwargs = self._base_launch_kwargs(layer)
        launch_kwargs.update(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.global_seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
        )
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)
        return finish_dcp_decode(
            raw_out, lse, launch_kwargs["seq_lens"], self.q_indptr_decode[: bs + 1], layer
        )

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (launch arguments in a dict, seq_lens_k local)
    # expect: clean
    def forward_decode_kwargs_local(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        launch_kwargs = self._base_launch_kwargs(layer)
        launch_kwargs.update(
            query=build_mla_query(q, q_rope, layer, 1),
            kv_cache=mla_kv_cache(self, layer),
            block_tables=metadata.block_kv_indices,
            seq_lens=metadata.seq_lens_k[:bs],
            max_seq_len=metadata.max_seq_len_k,
            causal_seqlens_kv_global=metadata.global_seq_lens_k[:bs],
        )
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(**launch_kwargs)
        return finish_dcp_decode(
            raw_out, lse, launch_kwargs["seq_lens"], self.q_indptr_decode[: bs + 1], layer
        )

    # ------------------------------------------------------------------
    # Draft extend (num_draft_tokens queries per request), closures.
    # ------------------------------------------------------------------

    # idiom: sglang/srt/layers/attention/trtllm_mla_backend.py TRTLLMMLABackend.forward_extend (draft_extend branch, trtllm-gen launch) with lens from a closure
    # expect: SG203
    def forward_draft_extend_closure(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> torch.Tensor:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = forward_batch.spec_info.num_tokens_per_req

        def _kv_lens() -> torch.Tensor:
            lens = forward_batch.seq_lens[:bs].to(torch.int32)
            if parallel.dcp_enabled:
                lens = get_dcp_lens(lens, parallel.dcp_size, parallel.dcp_rank).to(
                    torch.int32
                )
            return lens

        raw_out = trtllm_batch_decode_with_kv_cache_mla(
            query=build_mla_query(q, q_rope, layer, tokens_per_req),
            kv_cache=mla_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=_kv_lens(),
            max_seq_len=metadata.max_seq_len_k + tokens_per_req,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        return raw_out.view(-1, layer.tp_q_head_num * layer.v_head_dim)

    # idiom: sglang/srt/layers/attention/cutedsl_mla_backend.py CuteDslMLABackend._run_decode_kernel (DCP launch with causal_seqlens_kv_global) for draft extend, lens from a closure
    # expect: clean
    def forward_draft_extend_closure_bounded(
        self,
        q: torch.Tensor,
        q_rope: torch.Tensor,
        layer: RadixAttention,
        forward_batch: ForwardBatch,
    ) -> StateOut:
        parallel = get_parallel()
        metadata = self._metadata(forward_batch)
        bs = forward_batch.batch_size
        tokens_per_req = forward_batch.spec_info.num_tokens_per_req

        def _kv_lens() -> Tuple[torch.Tensor, torch.Tensor]:
            global_lens = forward_batch.seq_lens[:bs].to(torch.int32)
            local_lens = get_dcp_lens(
                global_lens, parallel.dcp_size, parallel.dcp_rank
            ).to(torch.int32)
            return local_lens, global_lens

        local_lens, global_lens = _kv_lens()
        raw_out, lse = trtllm_batch_decode_with_kv_cache_mla(
            query=build_mla_query(q, q_rope, layer, tokens_per_req),
            kv_cache=mla_kv_cache(self, layer),
            workspace_buffer=self.workspace_buffer,
            qk_nope_head_dim=self.qk_nope_head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            block_tables=metadata.block_kv_indices,
            seq_lens=local_lens,
            max_seq_len=metadata.max_seq_len_k,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=parallel.dcp_size,
            cp_rank=parallel.dcp_rank,
            causal_seqlens_kv_global=global_lens,
            return_lse=True,
        )
        return finish_dcp_decode(
            raw_out,
            lse,
            local_lens,
            self._dense_q_indptr(bs, tokens_per_req),
            layer,
            tokens_per_req,
        )
