"""Guards on vLLM's FlashInfer MLA backend: `FlashInferMLAImpl.forward_mqa` (G1, G3) and the
`trtllm_batch_decode_with_kv_cache_mla` name the backend module calls (G2).

The kernel name is wrapped where the backend module binds it, so the guard sees the exact arguments
forward_mqa launches with, after its non-causal flattening and DCP expansion.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from specguard.runtime import invariants as inv
from specguard.runtime.host import dtype_name, host_int, rows
from specguard.runtime.patching import Patcher, Skip, mark, run_check

BACKEND_MODULE = "vllm.v1.attention.backends.mla.flashinfer_mla"
KERNEL_NAME = "trtllm_batch_decode_with_kv_cache_mla"
FORWARD_SITE = "FlashInferMLAImpl.forward_mqa"
KERNEL_SITE = f"flashinfer_mla.{KERNEL_NAME}"

# The layer forward_mqa is serving, so a G2 message from the kernel wrapper can name it.
_current = threading.local()


def _layer_name(layer: Any) -> str:
    name = getattr(layer, "layer_name", None)
    return f"layer {name}" if isinstance(name, str) else f"layer {type(layer).__name__}"


def _check_query_rows(q: Any, md: Any, subject: str) -> inv.Violation | None:
    return inv.check_mla_query_rows(
        rows(q),
        host_int(md.num_decode_tokens, "attn_metadata.num_decode_tokens"),
        host_int(md.num_decodes, "attn_metadata.num_decodes"),
        site=FORWARD_SITE,
        subject=subject,
    )


def _causal_and_multi_token(md: Any) -> tuple[bool, bool, int, int]:
    causal = getattr(md, "causal", True)
    if not isinstance(causal, bool):
        raise Skip("attn_metadata.causal is not a host bool")
    n_tok = host_int(md.num_decode_tokens, "attn_metadata.num_decode_tokens")
    n_req = host_int(md.num_decodes, "attn_metadata.num_decodes")
    max_q = getattr(getattr(md, "decode", None), "max_query_len", 1)
    multi = n_tok > n_req or (isinstance(max_q, int) and max_q > 1)
    return causal, multi, n_tok, n_req


def _check_noncausal_layer(md: Any, layer: Any, subject: str) -> inv.Violation | None:
    causal, multi, n_tok, n_req = _causal_and_multi_token(md)
    if causal or not multi:
        return None
    flag = getattr(layer, "non_causal_multi_token_decode", None)
    if not isinstance(flag, bool):
        raise Skip("layer does not declare non_causal_multi_token_decode")
    return inv.check_noncausal_layer(
        causal=causal,
        multi_token=multi,
        num_decode_tokens=n_tok,
        num_decodes=n_req,
        layer_non_causal=flag,
        site=FORWARD_SITE,
        subject=subject,
    )


def _check_noncausal_dcp(impl: Any, md: Any, builder: Any, subject: str) -> inv.Violation | None:
    dcp = getattr(impl, "dcp_world_size", 1)
    if not isinstance(dcp, int) or dcp <= 1:
        return None
    causal, multi, _, _ = _causal_and_multi_token(md)
    supports = bool(getattr(builder, "supports_non_causal_multi_token_dcp", False))
    return inv.check_noncausal_dcp(
        causal=causal,
        multi_token=multi,
        dcp_world_size=dcp,
        backend_supports=supports,
        backend=getattr(builder, "__name__", "FlashInferMLA"),
        site=FORWARD_SITE,
        subject=subject,
    )


def make_forward_mqa(original: Any, builder: Any) -> Any:
    def forward_mqa(
        self: Any, q: Any, kv_c_and_k_pe_cache: Any, attn_metadata: Any, layer: Any, *args: Any, **kwargs: Any
    ) -> Any:
        subject = _layer_name(layer)
        run_check("G1", FORWARD_SITE, _check_query_rows, q, attn_metadata, subject)
        run_check("G3", FORWARD_SITE, _check_noncausal_layer, attn_metadata, layer, subject)
        run_check("G3", FORWARD_SITE, _check_noncausal_dcp, self, attn_metadata, builder, subject)
        previous = getattr(_current, "layer", None)
        _current.layer = subject
        try:
            return original(self, q, kv_c_and_k_pe_cache, attn_metadata, layer, *args, **kwargs)
        finally:
            _current.layer = previous

    return mark(forward_mqa, original)


def _shape(t: Any) -> tuple[int, ...] | None:
    return None if t is None else tuple(t.shape)


def _check_kernel(bound: dict[str, Any]) -> inv.Violation | None:
    query = bound["query"]
    block_tables = bound["block_tables"]
    names = ("block_tables", "seq_lens", "cum_seq_lens_q", "causal_seqlens_kv_global")
    dtypes = {n: dtype_name(bound[n]) for n in names if bound.get(n) is not None}
    enable_dcp = bound.get("enable_dcp", False)
    if not isinstance(enable_dcp, bool):
        raise Skip("enable_dcp is not a host bool")
    return inv.check_mla_decode_geometry(
        query_shape=tuple(query.shape),
        block_tables_shape=tuple(block_tables.shape),
        seq_lens_shape=_shape(bound.get("seq_lens")),
        cum_seq_lens_q_shape=_shape(bound.get("cum_seq_lens_q")),
        global_bound_shape=_shape(bound.get("causal_seqlens_kv_global")),
        dtypes=dtypes,
        enable_dcp=enable_dcp,
        cp_world=host_int(bound.get("cp_world", 1), "cp_world"),
        cp_rank=host_int(bound.get("cp_rank", 0), "cp_rank"),
        site=KERNEL_SITE,
        subject=getattr(_current, "layer", None) or "called outside forward_mqa",
    )


def make_kernel(original: Any) -> Any:
    try:
        param_names = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        param_names = [
            "query",
            "kv_cache",
            "workspace_buffer",
            "qk_nope_head_dim",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "block_tables",
            "seq_lens",
            "max_seq_len",
        ]

    def kernel(*args: Any, **kwargs: Any) -> Any:
        # vLLM passes everything by keyword; map positionals only when present.
        bound = dict(zip(param_names, args, strict=False)) if args else {}
        bound.update(kwargs)
        run_check("G2", KERNEL_SITE, _check_kernel, bound)
        return original(*args, **kwargs)

    return mark(kernel, original)


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    import importlib

    mod = importlib.import_module(BACKEND_MODULE)
    impl = getattr(mod, "FlashInferMLAImpl", None)
    builder = getattr(mod, "FlashInferMLAMetadataBuilder", None)
    if impl is not None and "forward_mqa" in impl.__dict__:
        patcher.replace(impl, "forward_mqa", make_forward_mqa(impl.__dict__["forward_mqa"], builder))
        installed.append(f"G1+G3@{FORWARD_SITE}")
    else:
        skipped.append(f"G1+G3@{FORWARD_SITE} (no FlashInferMLAImpl.forward_mqa in {BACKEND_MODULE})")
    kernel = getattr(mod, KERNEL_NAME, None)
    if callable(kernel):
        patcher.replace(mod, KERNEL_NAME, make_kernel(kernel))
        installed.append(f"G2@{KERNEL_SITE}")
    else:
        skipped.append(f"G2@{KERNEL_SITE} ({BACKEND_MODULE} does not bind {KERNEL_NAME})")
