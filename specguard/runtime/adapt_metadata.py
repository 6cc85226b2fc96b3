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
query_start_loc_cpu is a CPU tensor by contract and is read through `.numpy()`; everything else is a
Python int or a `.shape`. Only the outermost build on a thread checks, so a builder that delegates to
another one (or to `super().build`) is checked once. Other guards can observe builds (`observe_builds`):
the MLA guard records the decode query lengths its launch check needs there.
"""

from __future__ import annotations

import importlib
import inspect
import operator
import threading
from collections.abc import Callable
from typing import Any

from specguard.runtime import adapt_speculator
from specguard.runtime import invariants as inv
from specguard.runtime.host import host_array, host_int
from specguard.runtime.patching import ORIGINAL_ATTR, Patcher, Skip, arg_binder, guard_call, is_wrapped, mark, run_check
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


def observe_builds(builder_cls: type, observer: Observer, patcher: Patcher) -> None:
    """Call `observer(builder, common_attn_metadata, metadata)` after each build by a `builder_cls`."""
    entry = (builder_cls, observer)
    _observers.append(entry)
    patcher.at_restore(lambda: _observers.remove(entry) if entry in _observers else None)


def _site(builder: Any, method: str) -> Site:
    role = METHODS[method]
    if role == "target" and adapt_speculator.in_draft_step():
        role = "draft"
    key = (type(builder), method, role)
    site = _sites.get(key)
    if site is None:
        site = _sites[key] = POLICY.site("G0", f"{type(builder).__name__}.{method}({role})")
    return site


def _padding_allowed(builder: Any, method: str) -> bool:
    """Whether this build may be a FULL CUDA graph, whose metadata counts padding tokens no request owns."""
    if method == "build_for_cudagraph_capture":
        return True
    step = adapt_speculator.current_draft_step()
    if step is not None:  # a V2 draft step knows its own graph mode
        return step.cg_mode == "FULL"
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


def metadata_numbers(cm: Any) -> inv.MetadataNumbers:
    """The host-side numbers of one CommonAttentionMetadata (no tensor value is read but the CPU copy's).
    Plain Python on the numpy view's list: for a batch's few hundred entries at most, numpy's reductions
    cost more in call overhead than they save."""
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
    )


def _visibly_consistent(cm: Any) -> bool:
    """The healthy build, decided from the fewest reads: True only where every G0 invariant holds whatever the
    graph mode (the request tokens end exactly at num_actual_tokens). Anything else, or anything unusual (a
    count that is not a plain int), goes to the full check, which builds the numbers and the message; a
    property test holds this to agreeing with `check_common_metadata`."""
    n, tokens, longest_allowed = cm.num_reqs, cm.num_actual_tokens, cm.max_query_len
    if type(n) is not int or type(tokens) is not int or type(longest_allowed) is not int:
        return False
    qsl = host_array(cm.query_start_loc_cpu, "query_start_loc_cpu")
    if len(qsl) <= n or cm.query_start_loc.shape[0] <= n:
        return False
    head = qsl[: n + 1].tolist()
    if head[0] != 0 or head[n] != tokens:
        return False
    steps = list(map(operator.sub, head[1:], head[:-1]))
    if steps and (min(steps) < 0 or max(steps) > longest_allowed):
        return False
    if cm.slot_mapping.shape[0] < tokens or cm.block_table_tensor.shape[0] < n or cm.seq_lens.shape[0] < n:
        return False
    dcp = getattr(cm, "dcp_local_seq_lens", None)
    return dcp is None or dcp.shape[0] >= n


def _check_build(builder: Any, cm: Any, method: str, site: Site) -> inv.Violation | None:
    if cm is None:
        raise Skip("no CommonAttentionMetadata among the build arguments")
    if _visibly_consistent(cm):
        return None
    return inv.check_common_metadata(
        metadata_numbers(cm),
        padding_allowed=_padding_allowed(builder, method),
        site=site.name,
        subject=_subject(builder),
    )


def make_build(original: Callable[..., Any], method: str, metadata_cls: type) -> Callable[..., Any]:
    get_metadata = arg_binder(original, "common_attn_metadata")

    def build(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = _depth.n
        cm = None
        if depth == 0 or _observers:
            cm = get_metadata(args, kwargs)
            if not isinstance(cm, metadata_cls):  # a subclass that names it otherwise
                cm = next((a for a in (*args, *kwargs.values()) if isinstance(a, metadata_cls)), None)
        if depth == 0:
            site = _site(self, method)
            run_check(site, _check_build, self, cm, method, site)
        _depth.n = depth + 1
        try:
            result = original(self, *args, **kwargs)
        finally:
            _depth.n = depth
        for cls, observer in _observers:
            if isinstance(self, cls):
                guard_call("G0", f"{type(self).__name__}.{method}", observer, self, cm, result)
        return result

    return mark(build, original)


def _wrap_class(patcher: Patcher, cls: type, metadata_cls: type) -> None:
    for method in METHODS:
        func = cls.__dict__.get(method)
        if inspect.isfunction(func) and not getattr(func, "__isabstractmethod__", False) and not is_wrapped(func):
            patcher.replace(cls, method, make_build(func, method, metadata_cls))


def _subclasses(cls: type) -> list[type]:
    seen: list[type] = []
    stack = [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


def _hook_subclasses(patcher: Patcher, base: type, metadata_cls: type) -> None:
    """Wrap the builders of every subclass created from now on, as Python creates it."""
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, **kwargs: Any) -> None:  # noqa: N807 -- the hook Python calls
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        guard_call("G0", SUBCLASS_SITE, _wrap_class, patcher, cls, metadata_cls)

    setattr(__init_subclass__, ORIGINAL_ATTR, previous)
    patcher.replace(base, "__init_subclass__", classmethod(__init_subclass__))


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    mod = importlib.import_module(MODULE)
    base, metadata_cls = getattr(mod, BASE, None), getattr(mod, METADATA, None)
    if not (isinstance(base, type) and isinstance(metadata_cls, type)):
        skipped.append(f"G0 ({MODULE} has no {BASE} and {METADATA})")
        return
    for cls in [base, *_subclasses(base)]:
        _wrap_class(patcher, cls, metadata_cls)
    _hook_subclasses(patcher, base, metadata_cls)
    installed.append(f"G0@{BASE}.{'/'.join(METHODS)} (every subclass, present and future)")
