"""Guards on vLLM's FlashInfer MLA backend: `FlashInferMLAImpl.forward_mqa` (G1, G3) and the
`trtllm_batch_decode_with_kv_cache_mla` name the backend module calls (G2).

The kernel name is wrapped where the backend module binds it, so the guard sees the exact arguments
forward_mqa launches with, after its non-causal flattening and DCP expansion.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch

from specguard.runtime import invariants as inv
from specguard.runtime.host import dtype_name, host_int
from specguard.runtime.patching import Patcher, Skip, mark, run_check
from specguard.runtime.policy import POLICY

BACKEND_MODULE = "vllm.v1.attention.backends.mla.flashinfer_mla"
KERNEL_NAME = "trtllm_batch_decode_with_kv_cache_mla"
FORWARD_SITE = "FlashInferMLAImpl.forward_mqa"
KERNEL_SITE = f"flashinfer_mla.{KERNEL_NAME}"
_INT32 = torch.int32

_INT_OPERANDS = ("block_tables", "seq_lens", "cum_seq_lens_q", "causal_seqlens_kv_global")


def _layer_name(layer: Any) -> str:
    name = getattr(layer, "layer_name", None)
    return f"layer {name}" if isinstance(name, str) else f"layer {type(layer).__name__}"


def _check_forward(impl: Any, q: Any, md: Any, layer: Any, builder: Any) -> inv.Violation | None:
    """G1 and G3 at forward_mqa entry, in one pass (this runs once per layer per step)."""
    n_tok = host_int(md.num_decode_tokens, "attn_metadata.num_decode_tokens")
    n_req = host_int(md.num_decodes, "attn_metadata.num_decodes")
    q_rows = (q[0] if type(q) is tuple else q).shape[0]
    if q_rows != n_tok:
        return inv.check_mla_query_rows(q_rows, n_tok, n_req, site=FORWARD_SITE, subject=_layer_name(layer))
    causal = md.causal
    if causal is True:
        return None
    if type(causal) is not bool:
        raise Skip("attn_metadata.causal is not a host bool")
    max_q = getattr(md.decode, "max_query_len", 1)
    multi = n_tok > n_req or (type(max_q) is int and max_q > 1)
    if not multi:
        return None
    flag = getattr(layer, "non_causal_multi_token_decode", None)
    if type(flag) is not bool:
        raise Skip("layer does not declare non_causal_multi_token_decode")
    violation = inv.check_noncausal_layer(
        causal=False,
        multi_token=True,
        num_decode_tokens=n_tok,
        num_decodes=n_req,
        layer_non_causal=flag,
        site=FORWARD_SITE,
        subject=_layer_name(layer),
    )
    if violation is not None:
        return violation
    dcp = getattr(impl, "dcp_world_size", 1)
    if type(dcp) is not int or dcp <= 1:
        return None
    return inv.check_noncausal_dcp(
        causal=False,
        multi_token=True,
        dcp_world_size=dcp,
        backend_supports=bool(getattr(builder, "supports_non_causal_multi_token_dcp", False)),
        backend=getattr(builder, "__name__", "FlashInferMLA"),
        site=FORWARD_SITE,
        subject=_layer_name(layer),
    )


def make_forward_mqa(original: Any, builder: Any) -> Any:
    site = POLICY.site("G1+G3", FORWARD_SITE)

    def forward_mqa(
        self: Any, q: Any, kv_c_and_k_pe_cache: Any, attn_metadata: Any, layer: Any, *args: Any, **kwargs: Any
    ) -> Any:
        # Fast path for the common healthy causal launch, inlined because it runs for every layer of every
        # step. It can only route a launch to the full check, never clear one the full check would flag.
        try:
            n_tok = attn_metadata.num_decode_tokens
            causal = attn_metadata.causal
            fast = (
                type(n_tok) is int
                and (q[0] if type(q) is tuple else q).shape[0] == n_tok
                and (
                    causal is True
                    # a non-causal launch on a layer that declares it, without DCP or on a backend
                    # declaring non-causal DCP support: what _check_forward's G3 part requires
                    or (
                        causal is False
                        and layer.non_causal_multi_token_decode is True
                        and (
                            self.dcp_world_size == 1
                            or getattr(builder, "supports_non_causal_multi_token_dcp", False) is True
                        )
                    )
                )
            )
        except Exception:  # noqa: BLE001 -- the full check below reports what is wrong
            fast = False
        if fast:
            site.runs += 1
        else:
            run_check(site, _check_forward, self, q, attn_metadata, layer, builder)
        return original(self, q, kv_c_and_k_pe_cache, attn_metadata, layer, *args, **kwargs)

    return mark(forward_mqa, original)


def _calling_layer() -> str:
    """The layer of the forward_mqa that launched the kernel, found on the stack (only for a message)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "forward_mqa" and "layer" in frame.f_locals:
            return _layer_name(frame.f_locals["layer"])
        frame = frame.f_back
    return "called outside forward_mqa"


def _first_dim(t: Any) -> int | None:
    return None if t is None else t.shape[0]


def _check_kernel(bound: dict[str, Any]) -> inv.Violation | None:
    get = bound.get
    block_tables = bound["block_tables"]
    seq_lens, cum, glob = get("seq_lens"), get("cum_seq_lens_q"), get("causal_seqlens_kv_global")
    enable_dcp = get("enable_dcp", False)
    if type(enable_dcp) is not bool:
        raise Skip("enable_dcp is not a host bool")
    cp_world = host_int(get("cp_world", 1), "cp_world") if enable_dcp else 1
    cp_rank = host_int(get("cp_rank", 0), "cp_rank") if enable_dcp else 0
    query = bound["query"]
    dtypes_ok = (
        block_tables.dtype is _INT32
        and (seq_lens is None or seq_lens.dtype is _INT32)
        and (cum is None or cum.dtype is _INT32)
        and (glob is None or glob.dtype is _INT32)
    )
    if dtypes_ok and inv.mla_geometry_consistent(
        query.shape[0],
        block_tables.shape[0],
        _first_dim(seq_lens),
        _first_dim(cum),
        _first_dim(glob),
        enable_dcp,
        cp_world,
        cp_rank,
    ):
        return None
    operands = zip(_INT_OPERANDS, (block_tables, seq_lens, cum, glob), strict=True)
    return inv.check_mla_decode_geometry(
        query_shape=query.shape,
        block_tables_shape=block_tables.shape,
        seq_lens_shape=None if seq_lens is None else seq_lens.shape,
        cum_seq_lens_q_shape=None if cum is None else cum.shape,
        global_bound_shape=None if glob is None else glob.shape,
        dtypes={name: dtype_name(t) for name, t in operands if t is not None},
        enable_dcp=enable_dcp,
        cp_world=cp_world,
        cp_rank=cp_rank,
        site=KERNEL_SITE,
        subject=_calling_layer(),
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

    site = POLICY.site("G2", KERNEL_SITE)
    i32 = _INT32

    def kernel(*args: Any, **kwargs: Any) -> Any:
        # vLLM passes everything by keyword; map positionals only when present.
        if args:
            bound = dict(zip(param_names, args, strict=False))
            bound.update(kwargs)
        else:
            bound = kwargs
        # Inlined fast path (shapes and dtypes only, as in inv.mla_geometry_consistent); anything it cannot
        # clear goes to the full check, which names the problem.
        try:
            bt = bound["block_tables"]
            n = bt.shape[0]
            sl = bound.get("seq_lens")
            cum = bound.get("cum_seq_lens_q")
            gb = bound.get("causal_seqlens_kv_global")
            dcp = bound.get("enable_dcp", False)
            fast = (
                bt.dtype is i32
                and (sl is None or (sl.shape[0] == n and sl.dtype is i32))
                and (gb is None or (gb.shape[0] == n and gb.dtype is i32))
                and (
                    bound["query"].shape[0] == n
                    if cum is None
                    else (cum.shape[0] == n + 1 and cum.dtype is i32)
                )
                and (
                    dcp is False
                    or (
                        dcp is True
                        and gb is not None
                        and type(bound.get("cp_world")) is int
                        and type(bound.get("cp_rank")) is int
                        and 0 <= bound["cp_rank"] < bound["cp_world"]
                    )
                )
            )
        except Exception:  # noqa: BLE001 -- the full check below reports what is wrong
            fast = False
        if fast:
            site.runs += 1
        else:
            run_check(site, _check_kernel, bound)
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
