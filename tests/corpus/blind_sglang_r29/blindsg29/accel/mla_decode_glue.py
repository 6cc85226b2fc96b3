"""Thin forward_decode variants over the vendor trtllm-gen backend.

``GlueBase`` does the query/KV preparation and the rank-local epilogue; each
subclass decides how the per-request KV lengths reach the launcher (cached
attribute, property, dict, NamedTuple, partial, chunking, fallbacks).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Dict, Optional

import torch

from sglang.srt.runtime_context import get_parallel

from blindsg29.accel import dcp_utils
from blindsg29.accel.trtllm_gen_mla import VendorTrtllmGenMLABackend

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger(__name__)


class GlueBase(VendorTrtllmGenMLABackend):
    def _prepare(self, q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope):
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if query.dim() == 3:
            query = query.unsqueeze(1)
        metadata = self._decode_metadata(forward_batch)
        return query, kv_cache, metadata, forward_batch.batch_size

    def _emit(self, raw, layer, local_lens, bs):
        if not get_parallel().dcp_enabled:
            return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = raw
        return self._finish_dcp(raw_out, lse, layer, local_lens, bs)


class PreferGlobalPropertyBackend(GlueBase):
    @property
    def kernel_kv_lens(self) -> torch.Tensor:
        meta = self.forward_decode_metadata
        # Prefer the most complete per-request length the step hoisted.
        if meta.global_seq_lens_k is not None:
            return meta.global_seq_lens_k
        return meta.seq_lens_k

    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp with the kernel lengths read through a backend property
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = self.kernel_kv_lens[:bs]
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, metadata.seq_lens_k[:bs], bs)


class LocalPropertyBackend(GlueBase):
    @property
    def kernel_kv_lens(self) -> torch.Tensor:
        if self._dcp_lens is not None:
            return self._dcp_lens.local
        return self.forward_decode_metadata.seq_lens_k

    # idiom: trtllm_mla_backend.TRTLLMMLABackend._forward_decode_dcp, property returning the rank-local DcpLens view cached by init_forward_metadata
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = self.kernel_kv_lens[:bs]
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, kv_lens, bs)


class CachedLensBackend(GlueBase):
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        # One int32 conversion per step instead of one per layer.
        self._kv_lens_i32 = forward_batch.seq_lens.to(torch.int32)

    # idiom: trtllm_mla_backend one-int32-conversion-per-step lens, cached on self by init_forward_metadata and read back in forward_decode
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = self._kv_lens_i32[:bs]
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, metadata.seq_lens_k[:bs], bs)


class TupleUnpackBackend(GlueBase):
    # idiom: dcp_utils.split_dcp_lens NamedTuple consumed by positional unpacking
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        global_lens, local_lens = dcp_utils.split_dcp_lens(forward_batch.seq_lens[:bs])
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, local_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, global_lens, bs)


class TryLocalizeBackend(GlueBase):
    # idiom: trtllm_mla_backend._get_dcp_local_seq_lens guarded by try/except with a pass-through fallback
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        seq_lens = forward_batch.seq_lens[:bs]
        try:
            kv_lens = self._get_dcp_local_seq_lens(seq_lens)
        except (RuntimeError, ValueError) as exc:
            logger.warning("DCP length localization failed (%s); using batch lens", exc)
            kv_lens = seq_lens.to(torch.int32)
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, kv_lens, bs)


class TryLocalizeBothBackend(GlueBase):
    # idiom: trtllm_mla_backend._get_dcp_local_seq_lens guarded by try/except whose fallback localizes through dcp_utils.local_kv_lens
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        seq_lens = forward_batch.seq_lens[:bs]
        try:
            kv_lens = self._get_dcp_local_seq_lens(seq_lens)
        except (RuntimeError, ValueError) as exc:
            logger.warning("backend localization failed (%s); using dcp_utils", exc)
            kv_lens = dcp_utils.local_kv_lens(seq_lens)
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, kv_lens, bs)


class FallbackGlobalBackend(GlueBase):
    # idiom: trtllm_mla_backend._forward_decode_dcp seq_lens_k-or-fallback selection, fallback taken from the batch
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            kv_lens = forward_batch.seq_lens[:bs]
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, kv_lens, bs)


class FallbackLocalBackend(GlueBase):
    # idiom: trtllm_mla_backend._forward_decode_dcp seq_lens_k-or-fallback selection, fallback localized with _get_dcp_local_seq_lens
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        if metadata.seq_lens_k is not None:
            kv_lens = metadata.seq_lens_k[:bs]
        else:
            kv_lens = self._get_dcp_local_seq_lens(forward_batch.seq_lens[:bs])
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, kv_lens, bs)


class PartialLaunchBackend(GlueBase):
    # idiom: trtllm_mla_backend decode launch pre-bound with functools.partial (workspace, dims, scale, lengths) before the layer call
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        launch = functools.partial(
            dcp_utils.launch_mla_decode,
            workspace=self.workspace_buffer,
            seq_lens=forward_batch.seq_lens[:bs],
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        raw = launch(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
        )
        return self._emit(raw, layer, metadata.seq_lens_k[:bs], bs)


class PartialLocalLaunchBackend(GlueBase):
    # idiom: trtllm_mla_backend decode launch pre-bound with functools.partial, lengths localized by dcp_utils.local_kv_lens
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        kv_lens = dcp_utils.local_kv_lens(forward_batch.seq_lens[:bs])
        launch = functools.partial(
            dcp_utils.launch_mla_decode,
            workspace=self.workspace_buffer,
            seq_lens=kv_lens,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
            return_lse=dcp,
        )
        raw = launch(
            query=query,
            kv_cache=kv_cache,
            block_tables=metadata.block_kv_indices,
            max_seq_len=metadata.max_seq_len_k,
        )
        return self._emit(raw, layer, kv_lens, bs)


class LaunchCfgBackend(GlueBase):
    def init_forward_metadata(self, forward_batch: "ForwardBatch"):
        super().init_forward_metadata(forward_batch)
        meta = self.forward_decode_metadata
        if meta is None or meta.seq_lens_k is None:
            self._launch_cfg: Dict[str, Any] = {}
            return
        hoisted = (
            meta.global_seq_lens_k if meta.global_seq_lens_k is not None else meta.seq_lens_k
        )
        self._launch_cfg = {"seq_lens": hoisted, "max_seq_len": meta.max_seq_len_k}

    # idiom: trtllm_mla_backend per-step hoisting, kernel arguments kept in a dict built by init_forward_metadata and splatted into the launch
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        cfg = dict(self._launch_cfg)
        cfg["seq_lens"] = cfg["seq_lens"][:bs]
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, layer=layer,
            return_lse=get_parallel().dcp_enabled, **cfg,
        )
        return self._emit(raw, layer, metadata.seq_lens_k[:bs], bs)


class ChunkedBackend(GlueBase):
    # idiom: trtllm_mla_backend decode launch split into request chunks (bounded multiCtasKv workspace), per-chunk lengths sliced from the batch
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        step = max(1, self.flags.mla_decode_chunk_bs)
        outs, lses = [], []
        for start in range(0, bs, step):
            end = min(bs, start + step)
            raw = self._launch(
                query[start:end],
                kv_cache,
                metadata.block_kv_indices[start:end],
                forward_batch.seq_lens[start:end],
                metadata.max_seq_len_k,
                layer,
                return_lse=dcp,
            )
            if dcp:
                outs.append(raw[0])
                lses.append(raw[1])
            else:
                outs.append(raw)
        raw_all = (torch.cat(outs), torch.cat(lses)) if dcp else torch.cat(outs)
        return self._emit(raw_all, layer, metadata.seq_lens_k[:bs], bs)


class ChunkedLocalBackend(GlueBase):
    # idiom: trtllm_mla_backend decode launch split into request chunks, per-chunk lengths sliced from the rank-local seq_lens_k
    # expect: clean
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        dcp = get_parallel().dcp_enabled
        kv_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k is not None
            else dcp_utils.local_kv_lens(forward_batch.seq_lens[:bs])
        )
        step = max(1, self.flags.mla_decode_chunk_bs)
        pieces = [
            self._launch(
                query[s : s + step],
                kv_cache,
                metadata.block_kv_indices[s : s + step],
                kv_lens[s : s + step],
                metadata.max_seq_len_k,
                layer,
                return_lse=dcp,
            )
            for s in range(0, bs, step)
        ]
        if dcp:
            raw_all = (torch.cat([p[0] for p in pieces]), torch.cat([p[1] for p in pieces]))
        else:
            raw_all = torch.cat(pieces)
        return self._emit(raw_all, layer, kv_lens, bs)


class PaddedFallbackBackend(GlueBase):
    # idiom: trtllm_mla_backend forward_decode DP-padding backstop, replaced by a ternary that falls back to the batch lengths when seq_lens_k is short
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        query = query.unsqueeze(1) if query.dim() == 3 else query
        metadata = (
            getattr(forward_batch, "decode_trtllm_mla_metadata", None)
            or self.forward_decode_metadata
        )
        bs = forward_batch.batch_size
        kv_lens = (
            metadata.seq_lens_k[:bs]
            if metadata.seq_lens_k.shape[0] >= bs
            else forward_batch.seq_lens[:bs].to(torch.int32)
        )
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, kv_lens, bs)


class GetattrLensBackend(GlueBase):
    # idiom: getattr-with-default read of an optional rank-local field on TRTLLMMLADecodeMetadata, defaulting to the batch lengths
    # expect: SG203
    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        query, kv_cache, metadata, bs = self._prepare(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        kv_lens = getattr(metadata, "local_seq_lens", forward_batch.seq_lens)[:bs]
        raw = self._launch(
            query, kv_cache, metadata.block_kv_indices, kv_lens,
            metadata.max_seq_len_k, layer, return_lse=get_parallel().dcp_enabled,
        )
        return self._emit(raw, layer, metadata.seq_lens_k[:bs], bs)


class SpecGlueBackend(GlueBase):
    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                       q_rope=None, k_rope=None, cos_sin_cache=None, is_neox=False,
                       llama_4_scaling=None):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(
                q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                cos_sin_cache, is_neox, llama_4_scaling,
            )
        query, kv_cache = self._decode_query(
            q, k, layer, forward_batch, save_kv_cache, q_rope, k_rope
        )
        metadata = self._decode_metadata(forward_batch)
        bs = forward_batch.batch_size
        ndt = forward_batch.spec_info.draft_token_num
        total = (forward_batch.seq_lens[:bs] + ndt).to(torch.int32)
        query = query.view(bs, ndt, layer.tp_q_head_num, layer.head_dim).to(self.data_type)
        raw = dcp_utils.launch_spec_decode(
            query,
            kv_cache,
            self.workspace_buffer,
            metadata.block_kv_indices,
            total,
            self.max_context_len + ndt,
            dims=self.mla_dims,
            bmm1_scale=self._compute_decode_bmm1_scale(layer),
        )
        if not get_parallel().dcp_enabled:
            return raw.view(-1, layer.tp_q_head_num * layer.v_head_dim)
        raw_out, lse = raw
        return self._finish_dcp(raw_out, lse, layer, metadata.seq_lens_k, bs, q_len=ndt)
