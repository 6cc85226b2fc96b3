"""Guards on vLLM's FlashInfer MLA backend: `FlashInferMLAImpl.forward_mqa` (G1, G3) and the
`trtllm_batch_decode_with_kv_cache_mla` name the backend module calls (G2).

The kernel name is wrapped where the backend module binds it, so the guard sees the exact arguments
forward_mqa launches with, after its non-causal flattening, DCP expansion or uniform reshape. That
binding is verified at the first guarded forward_mqa: something that rebinds the name after install would
otherwise remove G2 silently.

The uniform reshape (`q.view(num_decodes, -1, ...)`, taken under DCP and by every causal multi-token launch
before vLLM 0.31.0) is only right when every decode request has num_decode_tokens / num_decodes tokens. The
MLA metadata does not carry the host query lengths, so the build of FlashInferMLAMetadataBuilder records
them (from query_start_loc_cpu, through G0's build hook) on the metadata it returns, and only when they are
ragged does forward_mqa hand them to the kernel check on its thread.
"""

from __future__ import annotations

import importlib
import inspect
import operator
import sys
import threading
from typing import Any

import torch

from specguard.runtime import adapt_metadata
from specguard.runtime import invariants as inv
from specguard.runtime.host import dtype_name, host_array, host_int
from specguard.runtime.mirror import mirror
from specguard.runtime.patching import Patcher, Skip, guard_call, mark, run_check
from specguard.runtime.policy import POLICY

BACKEND_MODULE = "vllm.v1.attention.backends.mla.flashinfer_mla"
KERNEL_NAME = "trtllm_batch_decode_with_kv_cache_mla"
FORWARD_SITE = "FlashInferMLAImpl.forward_mqa"
KERNEL_SITE = f"flashinfer_mla.{KERNEL_NAME}"
_INT32 = torch.int32

_INT_OPERANDS = ("block_tables", "seq_lens", "cum_seq_lens_q", "causal_seqlens_kv_global")
# On the MLA metadata a build returns: False when the decode requests can be launched uniformly, the tuple
# of their query lengths when they cannot; absent when no guarded build produced it.
DECODE_LENS_ATTR = "_specguard_decode_q_lens"


UNRECORDED = "decode query lengths not recorded"


class _Launch(threading.local):
    # For the kernel check on this thread: the ragged decode query lengths of the forward_mqa launching it,
    # or UNRECORDED for a multi-token decode whose lengths no guarded build recorded.
    pending: tuple[int, ...] | str | None = None


_launch = _Launch()


def record_decode_layout(builder: Any, cm: Any, md: Any) -> None:
    """After a FlashInfer MLA build: whether its decode requests can be launched as one uniform length."""
    n_dec, n_tok = getattr(md, "num_decodes", None), getattr(md, "num_decode_tokens", None)
    if cm is None or type(n_dec) is not int or type(n_tok) is not int:
        return
    head = host_array(cm.query_start_loc_cpu, "query_start_loc_cpu")[: n_dec + 1]
    head = head.tolist() if hasattr(head, "tolist") else list(head)
    q_lens = tuple(map(operator.sub, head[1:], head[:-1]))
    setattr(md, DECODE_LENS_ATTR, q_lens if inv.decode_needs_ragged_launch(q_lens, n_tok) else False)


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
    if type(causal) is not bool:
        raise Skip("attn_metadata.causal is not a host bool")
    max_q = getattr(md.decode, "max_query_len", 1)
    multi = n_tok > n_req or (type(max_q) is int and max_q > 1)
    if causal:
        # the launch geometry decides whether the query lengths matter: hand them to the kernel check
        recorded = getattr(md, DECODE_LENS_ATTR, None)
        if isinstance(recorded, tuple):
            _launch.pending = recorded
        elif recorded is None and multi:
            _launch.pending = UNRECORDED
        return None
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
        mixed_group_recorded=any(check == "G3" for check, _ in POLICY.recorded),
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


def _check_kernel_binding(module: Any, wrapper: Any) -> None:
    """Skip (counted, logged once) when the backend's kernel name no longer leads to G2's wrapper."""
    current = obj = module.__dict__.get(KERNEL_NAME)
    for _ in range(32):  # another plugin may have wrapped ours: follow __wrapped__
        if obj is wrapper:
            return
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            break
    what = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', type(current).__name__)}"
    raise Skip(
        f"{BACKEND_MODULE}.{KERNEL_NAME} was rebound after the guard wrapped it (now {what}): "
        "G2 does not see these launches"
    )


def make_forward_mqa(original: Any, builder: Any, module: Any = None, kernel_wrapper: Any = None) -> Any:
    site = POLICY.site("G1+G3", FORWARD_SITE)
    binding_checked = kernel_wrapper is None

    def forward_mqa(
        self: Any, q: Any, kv_c_and_k_pe_cache: Any, attn_metadata: Any, layer: Any, *args: Any, **kwargs: Any
    ) -> Any:
        nonlocal binding_checked
        if not binding_checked:
            binding_checked = True
            guard_call("G2", KERNEL_SITE, _check_kernel_binding, module, kernel_wrapper)
        # Fast path for a healthy launch, inlined because it runs for every layer of every step. It can
        # only route a launch to the full check, never clear one the full check would flag.
        recorded = None
        try:
            n_tok = attn_metadata.num_decode_tokens
            causal = attn_metadata.causal
            fast = (
                type(n_tok) is int  # a tensor here would make == below a device read
                and (q[0] if type(q) is tuple else q).shape[0] == n_tok
                and (
                    (
                        causal is True
                        # decode query lengths recorded at build (uniform: False; ragged: a tuple the
                        # kernel check gets), or unrecorded single-token decodes
                        and (
                            (recorded := getattr(attn_metadata, DECODE_LENS_ATTR, None)) is not None
                            or n_tok == attn_metadata.num_decodes
                        )
                    )
                    # non-causal on a layer that declares it, without DCP or on a backend that
                    # supports non-causal DCP: what _check_forward's G3 part requires
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
            next(site.counter)
            if recorded is None or recorded is False:
                return original(self, q, kv_c_and_k_pe_cache, attn_metadata, layer, *args, **kwargs)
            _launch.pending = recorded
        else:
            run_check(site, _check_forward, self, q, attn_metadata, layer, builder)
            if _launch.pending is None:
                return original(self, q, kv_c_and_k_pe_cache, attn_metadata, layer, *args, **kwargs)
        try:
            return original(self, q, kv_c_and_k_pe_cache, attn_metadata, layer, *args, **kwargs)
        finally:
            _launch.pending = None

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


def _check_kernel(bound: dict[str, Any], pending: tuple[int, ...] | str | None = None) -> inv.Violation | None:
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
        if pending is None or cum is not None or len(query.shape) != 4:
            return None  # no recorded ragged decode, or not the uniform-reshape launch
        if not isinstance(pending, tuple):
            raise Skip(
                f"{pending} at the build of this metadata (no guarded FlashInferMLAMetadataBuilder build made "
                "it), so a ragged decode on the uniform-reshape launch cannot be ruled out"
            )
        return inv.check_uniform_reshape(
            query_shape=tuple(query.shape),
            q_lens=pending,
            dcp_world_size=cp_world if enable_dcp else 1,
            site=KERNEL_SITE,
            subject=_calling_layer(),
        )
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
        decode_q_lens=pending if isinstance(pending, tuple) else None,
    )


# The kernel parameters G2 reads, in the order its check takes them, with the value each has when an
# older FlashInfer's signature lacks it.
_WATCHED = {
    "query": None,
    "block_tables": None,
    "seq_lens": None,
    "cum_seq_lens_q": None,
    "causal_seqlens_kv_global": None,
    "enable_dcp": False,
    "cp_world": 1,
    "cp_rank": 0,
}


def make_kernel_check(site: Any) -> Any:
    i32 = _INT32

    launch = _launch

    def check(query: Any, bt: Any, sl: Any, cum: Any, gb: Any, dcp: Any, world: Any, rank: Any) -> None:
        # Inlined fast path (shapes and dtypes only, as in inv.mla_geometry_consistent); anything it cannot
        # clear goes to the full check, which names the problem. A ragged decode handed over by forward_mqa
        # always takes the full check.
        pending = launch.pending
        try:
            n = bt.shape[0]
            fast = (
                (pending is None or cum is not None)  # recorded ragged lengths matter only without cum
                and bt.dtype is i32
                and (sl is None or (sl.dtype is i32 and sl.shape[0] == n))
                and (query.shape[0] == n if cum is None else (cum.dtype is i32 and cum.shape[0] == n + 1))
            )
            if fast and (gb is not None or dcp is not False):  # DCP operands only where they are passed
                fast = (
                    gb is not None
                    and gb.dtype is i32
                    and gb.shape[0] == n
                    and (
                        dcp is False or (dcp is True and type(world) is int and type(rank) is int and 0 <= rank < world)
                    )
                )
        except Exception:  # noqa: BLE001 -- the full check below reports what is wrong
            fast = False
        if fast:
            next(site.counter)
        else:
            bound = dict(zip(_WATCHED, (query, bt, sl, cum, gb, dcp, world, rank), strict=True))
            run_check(site, _check_kernel, bound, pending)

    return check


def make_kernel(original: Any) -> Any:
    check = make_kernel_check(POLICY.site("G2", KERNEL_SITE))
    # FlashInfer's real entry: a wrapper with its own parameters (no kwargs dict per launch).
    fast_wrapper = mirror(original, check, _WATCHED, required=("query", "block_tables"))
    if fast_wrapper is not None:
        return mark(fast_wrapper, original)
    try:
        param_names = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        param_names = []

    def kernel(*args: Any, **kwargs: Any) -> Any:
        # A stand-in or an opaque callable: map positionals by the signature when it has one.
        bound = {**dict(zip(param_names, args, strict=False)), **kwargs} if args else kwargs
        check(*(bound.get(name, absent) for name, absent in _WATCHED.items()))
        return original(*args, **kwargs)

    return mark(kernel, original)


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    mod = importlib.import_module(BACKEND_MODULE)
    impl = getattr(mod, "FlashInferMLAImpl", None)
    builder = getattr(mod, "FlashInferMLAMetadataBuilder", None)
    kernel_wrapper = None
    kernel = getattr(mod, KERNEL_NAME, None)
    if callable(kernel):
        patcher.replace(mod, KERNEL_NAME, make_kernel(kernel))
        kernel_wrapper = mod.__dict__[KERNEL_NAME]
        installed.append(f"G2@{KERNEL_SITE}")
    else:
        skipped.append(f"G2@{KERNEL_SITE} ({BACKEND_MODULE} does not bind {KERNEL_NAME})")
    if impl is not None and "forward_mqa" in impl.__dict__:
        forward = make_forward_mqa(impl.__dict__["forward_mqa"], builder, mod, kernel_wrapper)
        patcher.replace(impl, "forward_mqa", forward)
        installed.append(f"G1+G3@{FORWARD_SITE}")
    else:
        skipped.append(f"G1+G3@{FORWARD_SITE} (no FlashInferMLAImpl.forward_mqa in {BACKEND_MODULE})")
    if isinstance(builder, type):
        adapt_metadata.observe_builds(builder, record_decode_layout, patcher)
