"""G0 at the attention-metadata boundary: every `build`, `build_for_drafting` and
`build_for_cudagraph_capture` of every `AttentionMetadataBuilder` subclass (vllm/v1/attention/backend.py)
checks the CommonAttentionMetadata it is handed, before the builder runs.

That is the one place every path goes through: the V1 runner and its proposers (vllm/v1/spec_decode/*.py:
draft_model, eagle, dflash, ... call `build_for_drafting`), the V2 runner and its speculators (through
`build_attn_metadata`), the CUDA-graph capture, any backend (FlashInfer, FlashAttention, CPU, Triton, an
out-of-tree one). Builder classes that exist at install time are wrapped then; classes defined later (a
backend imported lazily, the subclasses vLLM creates at runtime for chunked-local or encoder-only
attention) are wrapped as they are created, through `AttentionMetadataBuilder.__init_subclass__`.

Once per build (a builder serves every layer of its group), from host values and shapes only:
query_start_loc_cpu is a CPU tensor by contract and is read as a list; query_start_loc is read the same way
only where it is host memory too (vLLM's CPU build), to compare the two copies; everything else is a Python
int or a `.shape`. Whether the build may carry padding is decided by its batch's CUDA-graph mode, as vLLM's
dispatcher decided it for that batch (batch_mode.py). Only the outermost build on a thread checks, so a
builder that delegates to another one (or to `super().build`) is checked once. Other guards can observe builds
(`observe_builds`): the MLA guard records the decode query lengths its launch check needs there."""

from __future__ import annotations

import importlib
import inspect
import operator
import threading
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from specguard.runtime import adapt_lengths, adapt_speculator, batch_mode
from specguard.runtime import invariants as inv
from specguard.runtime.host import host_array, host_int, host_list
from specguard.runtime.patching import (
    ORIGINAL_ATTR,
    Patcher,
    Skip,
    arg_binder,
    guard_call,
    is_wrapped,
    mark,
    run_check,
    subclasses,
)
from specguard.runtime.policy import POLICY, Site

MODULE = "vllm.v1.attention.backend"
BASE = "AttentionMetadataBuilder"
METADATA = "CommonAttentionMetadata"
# method -> the role its builds play (a plain `build` inside a V2 draft step is a draft build)
METHODS = {"build": "target", "build_for_drafting": "draft", "build_for_cudagraph_capture": "capture"}
SUBCLASS_SITE = f"{BASE}.__init_subclass__"

Observer = Callable[[Any, Any, Any], None]  # (builder, common_attn_metadata, built metadata)


class _Depth(threading.local):
    n = 0


_depth = _Depth()
_observers: list[tuple[type, Observer]] = []
_sites: dict[tuple[type, str, str], Site] = {}
_hooks: list[batch_mode.Hooks] = []  # the V1 batch-mode wrappers still to install, set by install()


_observed_types: dict[type, bool] = {}  # builder class -> whether an observer watches it (cleared on change)


def observe_builds(builder_cls: type, observer: Observer, patcher: Patcher) -> None:
    """Call `observer(builder, common_attn_metadata, metadata)` after each build by a `builder_cls`."""
    entry = (builder_cls, observer)
    _observers.append(entry)
    _observed_types.clear()

    def forget() -> None:
        if entry in _observers:
            _observers.remove(entry)
        _observed_types.clear()

    patcher.at_restore(forget)


def _site(builder: Any, method: str) -> Site:
    role = METHODS[method]
    if role == "target" and adapt_speculator._tls.stack:  # inside a V2 draft step
        role = "draft"
    key = (type(builder), method, role)
    site = _sites.get(key)
    if site is None:
        site = _sites[key] = POLICY.site("G0", f"{type(builder).__name__}.{method}({role})")
    return site


def batch_graph_mode(builder: Any, method: str) -> tuple[bool, str, int | None]:
    """(may this build carry padding tokens no request owns, the batch's mode as the message names it, the
    token count of the FULL graph it replays): only a batch that replays a FULL graph may be padded."""
    if method == "build_for_cudagraph_capture":
        return True, "FULL graph capture", None
    step = adapt_speculator.current_draft_step()
    if step is not None:  # a V2 draft step: the speculator helper saw its descriptor
        return step.cg_mode == "FULL", f"{step.cg_mode}, V2 draft step", step.descriptor_tokens
    decision = batch_mode.latest()
    if decision is not None:
        return decision.mode == "FULL", f"{decision.mode}, dispatched by {decision.source}", decision.num_tokens
    if _process_captures_full(builder):
        return True, "not dispatched where the guard sees it; this process captures FULL graphs", None
    return False, "not dispatched where the guard sees it; this process captures no FULL graph", None


def _process_captures_full(builder: Any) -> bool:
    """Without the batch's decision: whether this process can replay a FULL graph at all."""
    config = getattr(getattr(builder, "vllm_config", None), "compilation_config", None)
    mode = getattr(config, "cudagraph_mode", None)
    has_full = getattr(mode, "has_full_cudagraphs", None)
    if not callable(has_full):
        return True  # unknown: check only that no request owns more tokens than the batch has
    sizes = getattr(config, "cudagraph_capture_sizes", None)
    # vLLM's CPU platform empties the capture sizes: no graph is ever captured there, whatever the mode says
    return bool(has_full()) and (sizes is None or len(sizes) > 0)


def _subject(builder: Any) -> str:
    names = getattr(builder, "layer_names", None)
    if isinstance(names, (list, tuple)) and names and isinstance(names[0], str):
        more = f" (+{len(names) - 1} more)" if len(names) > 1 else ""
        return f"layers {names[0]}{more}"
    return f"builder {type(builder).__name__}"


def _rows(t: Any) -> int:
    return t.shape[0]


def _host_copy_desync(cm: Any, head: list, n: int) -> tuple[int, int, int] | None:
    """Where query_start_loc is host memory too, its first entry that differs from the CPU copy's."""
    dev = cm.query_start_loc
    if getattr(dev, "is_cpu", False) is not True or dev.shape[0] <= n:
        return None
    host_ptr = getattr(cm.query_start_loc_cpu, "data_ptr", None)
    if host_ptr is not None and dev.data_ptr() == host_ptr():
        return None  # one buffer: nothing to compare
    other = host_list(dev, n + 1, "query_start_loc")
    return next(((i, d, h) for i, (d, h) in enumerate(zip(other, head, strict=False)) if d != h), None)


def metadata_numbers(cm: Any) -> inv.MetadataNumbers:
    """The host-side numbers of one CommonAttentionMetadata (no tensor value is read but host memory's).
    Plain Python on lists: for a batch's few hundred entries at most, numpy's reductions cost more in call
    overhead than they save."""
    n = host_int(cm.num_reqs, "num_reqs")
    qsl = host_array(cm.query_start_loc_cpu, "query_start_loc_cpu")
    head = qsl[: n + 1].tolist() if hasattr(qsl, "tolist") else list(qsl[: n + 1])
    steps = list(map(operator.sub, head[1:], head[:-1]))
    lowest = min(steps, default=0)
    dcp = getattr(cm, "dcp_local_seq_lens", None)
    return inv.MetadataNumbers(
        num_reqs=n,
        num_actual_tokens=host_int(cm.num_actual_tokens, "num_actual_tokens"),
        max_query_len=host_int(cm.max_query_len, "max_query_len"),
        qsl_cpu_len=len(qsl),
        qsl_len=_rows(cm.query_start_loc),
        qsl_first=int(head[0]) if head else None,
        qsl_end=int(head[n]) if len(head) > n else None,
        first_decrease=next(i for i, step in enumerate(steps) if step < 0) if lowest < 0 else None,
        longest_query=max(steps, default=0),
        slot_rows=_rows(cm.slot_mapping),
        block_table_rows=_rows(cm.block_table_tensor),
        seq_lens_rows=_rows(cm.seq_lens),
        dcp_local_seq_lens_rows=None if dcp is None else _rows(dcp),
        qsl_desync=_host_copy_desync(cm, head, n) if len(head) == n + 1 else None,
    )


def _healthy_offsets(cm: Any) -> list[int] | None:
    """The healthy build, decided from the fewest reads: the first num_reqs + 1 entries of query_start_loc_cpu
    (which G5 reuses) only where every G0 invariant holds whatever the graph mode (the request tokens end exactly
    at num_actual_tokens), else None. Anything else, or anything unusual (a count that is not a plain int, a
    copy on a device where the full check would skip), goes to the full check, which builds the numbers and the
    message; a property test holds this to agreeing with `check_common_metadata`. Every read here costs
    0.05-0.3 us, so each one is counted (benchmarks/guard_build.py measures the whole check)."""
    n, tokens, longest_allowed = cm.num_reqs, cm.num_actual_tokens, cm.max_query_len
    if type(n) is not int or type(tokens) is not int or type(longest_allowed) is not int:
        return None
    qsl, dev = cm.query_start_loc_cpu, cm.query_start_loc
    entries = n + 1
    rows = qsl.shape[0]
    if qsl.is_cpu is not True or rows < entries or dev.shape[0] < entries:
        return None
    head = host_list(qsl, entries, "query_start_loc_cpu")
    if head[0] != 0 or head[n] != tokens:
        return None
    if dev.is_cpu is True and dev.data_ptr() != qsl.data_ptr() and host_list(dev, entries, "query_start_loc") != head:
        return None  # both copies in host memory, and they disagree
    if n > 1:
        steps = sorted(map(operator.sub, head[1:], head[:-1]))  # one pass for the shortest and the longest
        if steps[0] < 0 or steps[-1] > longest_allowed:
            return None
    elif n == 1 and not 0 <= tokens <= longest_allowed:
        return None
    if cm.slot_mapping.shape[0] < tokens or cm.block_table_tensor.shape[0] < n or cm.seq_lens.shape[0] < n:
        return None
    dcp = cm.dcp_local_seq_lens
    return head if dcp is None or dcp.shape[0] >= n else None


def _check_build(builder: Any, cm: Any, method: str, site: Site) -> inv.Violation | None:
    if cm is None:
        raise Skip("no CommonAttentionMetadata among the build arguments")
    numbers = metadata_numbers(cm)
    allowed, mode, graph_tokens = batch_graph_mode(builder, method)
    return inv.check_common_metadata(
        numbers,
        padding_allowed=allowed,
        site=site.name,
        subject=_subject(builder),
        batch_mode=mode,
        dispatched_tokens=graph_tokens if allowed else None,
    )


def _metadata_among(args: tuple, kwargs: dict, metadata_cls: type) -> Any:
    """The CommonAttentionMetadata a build was handed under another name (a subclass's signature)."""
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, metadata_cls)), None)


def make_build(original: Callable[..., Any], method: str, metadata_cls: type) -> Callable[..., Any]:
    get_metadata = arg_binder(original, "common_attn_metadata")
    get_draft_index = arg_binder(original, "draft_index") if method == "build_for_drafting" else None
    outside_draft_steps: dict[type, Site] = {}  # this method's site per builder class, outside V2 draft steps
    speculator = adapt_speculator._tls
    depth_of = _depth

    def build(self: Any, *args: Any, **kwargs: Any) -> Any:
        if depth_of.n:  # a build inside a build (delegation, super().build): checked by the outer one
            return _inner_build(original, method, metadata_cls, get_metadata, self, args, kwargs)
        started = perf_counter_ns()
        cm = get_metadata(args, kwargs)
        if type(cm) is not metadata_cls and not isinstance(cm, metadata_cls):
            cm = _metadata_among(args, kwargs, metadata_cls)
        if _hooks:
            _hooks[0].poll()
        site = None if speculator.stack else outside_draft_steps.get(type(self))
        if site is None:
            site = _site(self, method)
            if not speculator.stack:
                outside_draft_steps[type(self)] = site
        try:
            offsets = None if cm is None else _healthy_offsets(cm)
        except Exception:  # noqa: BLE001 -- anything unusual goes to the full check, which reports it
            offsets = None
        if offsets is not None:
            next(site.counter)
        else:
            run_check(site, _check_build, self, cm, method, site)
        g5_ns = 0
        if cm is not None:
            draft_index = get_draft_index(args, kwargs) if get_draft_index else None
            g5_ns = _check_lengths(self, cm, draft_index, site, offsets)
        depth_of.n = 1
        called = perf_counter_ns()
        try:
            result = original(self, *args, **kwargs)
        finally:
            depth_of.n = 0
        returned = perf_counter_ns()
        if _observers and _observed(self):
            _observe(self, method, cm, result)
        # the site's clock: all this wrapper does around the build but G5, which has its own
        site.ns += (called - started) - g5_ns + (perf_counter_ns() - returned)
        return result

    return mark(build, original)


def _check_lengths(builder: Any, cm: Any, draft_index: Any, site: Site, offsets: list[int] | None) -> int:
    """G5 on this build's lengths (adapt_lengths.py): a V1 draft build names its step, a V2 one is inside the
    speculator helper that does. `offsets`: query_start_loc_cpu's head where G0 found the build healthy.
    Returns the ns G5's clock took (0 where it had nothing to judge), which G0's clock leaves out."""
    if draft_index is None and adapt_speculator._tls.stack:
        step = adapt_speculator.current_draft_step()
        draft_index = step.step if step is not None else None
    if not isinstance(draft_index, int):
        draft_index = None
    if not adapt_lengths.wanted(cm, draft_index):
        return 0
    started = perf_counter_ns()
    lengths_site = adapt_lengths.site_for(site)
    if getattr(cm.seq_lens, "is_cpu", None) is not True:  # a GPU's lengths: counted, never read, no exception
        POLICY.skip("G5", lengths_site.name, adapt_lengths.DEVICE_LENGTHS)
    else:
        run_check(lengths_site, adapt_lengths.check, builder, cm, draft_index, lengths_site, _subject, offsets)
    spent = perf_counter_ns() - started
    lengths_site.ns += spent
    return spent


def _inner_build(
    original: Callable[..., Any],
    method: str,
    metadata_cls: type,
    get_metadata: Any,
    builder: Any,
    args: tuple,
    kwargs: dict,
) -> Any:
    depth = _depth.n
    _depth.n = depth + 1
    try:
        result = original(builder, *args, **kwargs)
    finally:
        _depth.n = depth
    if _observers and _observed(builder):
        cm = get_metadata(args, kwargs)
        if not isinstance(cm, metadata_cls):
            cm = _metadata_among(args, kwargs, metadata_cls)
        _observe(builder, method, cm, result)
    return result


def _observed(builder: Any) -> bool:
    kind = type(builder)
    seen = _observed_types.get(kind)
    if seen is None:
        seen = _observed_types[kind] = any(issubclass(kind, cls) for cls, _ in _observers)
    return seen


def _observe(builder: Any, method: str, cm: Any, result: Any) -> None:
    for cls, observer in _observers:
        if isinstance(builder, cls):
            guard_call("G0", f"{type(builder).__name__}.{method}", observer, builder, cm, result)


def _wrap_class(patcher: Patcher, cls: type, metadata_cls: type) -> None:
    for method in METHODS:
        func = cls.__dict__.get(method)
        if inspect.isfunction(func) and not getattr(func, "__isabstractmethod__", False) and not is_wrapped(func):
            patcher.replace(cls, method, make_build(func, method, metadata_cls))


def _hook_subclasses(patcher: Patcher, base: type, metadata_cls: type) -> None:
    """Wrap the builders of every subclass created from now on, as Python creates it."""
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, **kwargs: Any) -> None:  # noqa: N807 -- the hook Python calls
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        guard_call("G0", SUBCLASS_SITE, _wrap_class, patcher, cls, metadata_cls)
        if _hooks:  # vLLM creates builder classes while it sets a runner up: its decision function is there
            _hooks[0].poll()

    setattr(__init_subclass__, ORIGINAL_ATTR, previous)
    patcher.replace(base, "__init_subclass__", classmethod(__init_subclass__))


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    mod = importlib.import_module(MODULE)
    base, metadata_cls = getattr(mod, BASE, None), getattr(mod, METADATA, None)
    if not (isinstance(base, type) and isinstance(metadata_cls, type)):
        skipped.append(f"G0 ({MODULE} has no {BASE} and {METADATA})")
        return
    for cls in [base, *subclasses(base)]:
        _wrap_class(patcher, cls, metadata_cls)
    _hook_subclasses(patcher, base, metadata_cls)
    hooks = batch_mode.Hooks(patcher)
    _hooks[:] = [hooks]
    patcher.at_restore(_hooks.clear)
    hooks.poll()
    installed.append(f"G0@{BASE}.{'/'.join(METHODS)} (every subclass, present and future)")
    installed.append(f"G5@the same builds ({_where_lengths_are()})")


def _where_lengths_are() -> str:
    """What G5 can read on this platform: vLLM's CPU build keeps the lengths in host memory, a GPU does not."""
    try:
        from vllm.platforms import current_platform

        device = str(current_platform.device_type)
    except Exception:  # noqa: BLE001 -- no platform to ask: say what is read wherever
        device = ""
    if not device:
        return "host lengths only; device lengths are a counted skip"
    if device == "cpu":
        return "lengths in host memory on this platform: every draft and DCP build is judged"
    return f"seq_lens is {device} memory here: each build it would judge is a counted skip, never a read"
