"""G4 on the speculators' shared draft-metadata helper (vllm/v1/worker/gpu/spec_decode/speculator.py).

Two wrappers cooperate:
- the helper (0.33.0 `DraftModelSpeculator._build_attn_metadata`, which takes the batch descriptor;
  0.28.0 `_build_draft_attn_metadata`, which does not) records, host-side, the speculator class, the
  CUDA-graph mode and the real query tokens (`query_start_loc` end, from the numpy layout or
  num_reqs * num_query_per_req);
- `build_attn_metadata`, as speculator.py binds it, compares the `num_tokens` it is handed with that.
For helpers without a descriptor argument, the descriptor comes from the last `dispatch_cg_and_sync_dp`
on this thread whose padded token count is the one handed to the helper.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from dataclasses import dataclass
from typing import Any

from specguard.runtime import batch_mode
from specguard.runtime import invariants as inv
from specguard.runtime.host import host_array, host_int
from specguard.runtime.patching import Patcher, Skip, guard_call, mark, run_check
from specguard.runtime.policy import POLICY

SPEC_MODULE = "vllm.v1.worker.gpu.spec_decode.speculator"
DP_MODULE = "vllm.v1.worker.gpu.dp_utils"
HELPERS = ("_build_attn_metadata", "_build_draft_attn_metadata")
BUILDER = "build_attn_metadata"
DISPATCH = "dispatch_cg_and_sync_dp"


class _Thread(threading.local):
    # class defaults: reading an attribute a thread never set costs no AttributeError (G0 reads `stack` per build)
    stack: list | None = None
    dispatch: Dispatch | None = None


_tls = _Thread()


@dataclass
class DraftStep:
    speculator: str
    site: str
    cg_mode: str
    real_tokens: int
    num_reqs: int
    descriptor_tokens: int | None
    dispatched_tokens: int | None
    dp_size: int | None
    step: int | None = None  # the helper's draft step index, where it takes one


@dataclass
class Dispatch:
    descriptor: Any
    num_tokens: int | None
    dp_size: int | None


def _stack() -> list[DraftStep | None]:
    stack = _tls.stack
    if stack is None:
        stack = _tls.stack = []
    return stack


def in_draft_step() -> bool:
    """Whether this thread is inside a speculator's shared draft-metadata helper (V2 runner)."""
    return bool(_tls.stack)


def current_draft_step() -> DraftStep | None:
    """The draft step the helper on this thread described (None outside one, or where it could not)."""
    stack = _tls.stack
    return stack[-1] if stack else None


def _mode_name(desc: Any) -> str:
    mode = getattr(desc, "cg_mode", None)
    name = getattr(mode, "name", None)
    if not isinstance(name, str):
        raise Skip("batch descriptor has no CUDA-graph mode")
    return name


def _real_tokens(bound: dict[str, Any], num_reqs: int) -> int:
    qsl = bound.get("query_start_loc_np")
    if qsl is not None:
        arr = host_array(qsl, "query_start_loc_np")
        return int(arr[num_reqs] if len(arr) > num_reqs else arr[-1])
    per_req = bound.get("num_query_per_req", 1)
    if per_req is None:
        raise Skip("num_query_per_req not given to the helper")
    return num_reqs * host_int(per_req, "num_query_per_req")


def _last_dispatch(tokens: int | None) -> Dispatch | None:
    last = _tls.dispatch
    if last is None or tokens is None:
        return last
    return last if getattr(last.descriptor, "num_tokens", None) == tokens else None


def _draft_step(self: Any, bound: dict[str, Any], site: str) -> DraftStep:
    num_reqs = host_int(bound["num_reqs"], "num_reqs")
    desc = bound.get("batch_desc")
    if desc is not None:  # 0.33.0-style helper: the descriptor is an argument
        dispatch = _last_dispatch(host_int(desc.num_tokens, "batch_desc.num_tokens"))
    else:  # 0.28.0-style helper: it gets the padded count; find the descriptor that produced it
        handed = host_int(bound["num_tokens_padded"], "num_tokens_padded")
        dispatch = _last_dispatch(handed)
        if dispatch is None:
            raise Skip("no batch descriptor dispatched for this draft step (CUDA-graph mode unknown)")
        desc = dispatch.descriptor
    dp_size = dispatch.dp_size if dispatch is not None else getattr(self, "dp_size", None)
    return DraftStep(
        speculator=type(self).__name__,
        site=site,
        cg_mode=_mode_name(desc),
        real_tokens=_real_tokens(bound, num_reqs),
        num_reqs=num_reqs,
        descriptor_tokens=host_int(desc.num_tokens, "batch_desc.num_tokens"),
        dispatched_tokens=dispatch.num_tokens if dispatch is not None else None,
        dp_size=dp_size if isinstance(dp_size, int) else None,
        step=bound.get("step") if type(bound.get("step")) is int else None,
    )


def _param_names(func: Any, drop_first: bool) -> list[str]:
    names = list(inspect.signature(func).parameters)
    return names[1:] if drop_first else names


def make_helper(original: Any, site: str) -> Any:
    names = _param_names(original, drop_first=True)

    def helper(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(names, args, strict=False))
        bound.update(kwargs)
        step = guard_call("G4", site, _draft_step, self, bound, site)
        stack = _stack()
        stack.append(step)  # None when the step could not be described: the builder then skips
        try:
            return original(self, *args, **kwargs)
        finally:
            stack.pop()

    return mark(helper, original)


def _check_builder(step: DraftStep, handed: Any) -> inv.Violation | None:
    return inv.check_draft_token_count(
        handed_tokens=host_int(handed, "build_attn_metadata num_tokens"),
        real_tokens=step.real_tokens,
        cg_mode=step.cg_mode,
        speculator=step.speculator,
        num_reqs=step.num_reqs,
        descriptor_tokens=step.descriptor_tokens,
        dispatched_tokens=step.dispatched_tokens,
        dp_size=step.dp_size,
        site=step.site,
    )


def make_builder(original: Any) -> Any:
    names = _param_names(original, drop_first=False)
    idx = names.index("num_tokens") if "num_tokens" in names else None

    def build_attn_metadata(*args: Any, **kwargs: Any) -> Any:
        stack = _tls.stack
        if stack and stack[-1] is not None:
            handed = kwargs.get("num_tokens")
            if handed is None and idx is not None and len(args) > idx:
                handed = args[idx]
            step = stack[-1]
            run_check(POLICY.site("G4", step.site), _check_builder, step, handed)
        return original(*args, **kwargs)

    return mark(build_attn_metadata, original)


def _record_dispatch(result: Any, bound: dict[str, Any]) -> None:
    desc = result[0] if isinstance(result, tuple) else result
    if getattr(desc, "cg_mode", None) is None:
        return
    n = bound.get("num_tokens")
    dp = bound.get("dp_size")
    _tls.dispatch = Dispatch(desc, n if isinstance(n, int) else None, dp if isinstance(dp, int) else None)
    batch_mode.record(desc.cg_mode, getattr(desc, "num_tokens", None), DISPATCH)  # G0 judges the batch by it


def make_dispatch(original: Any) -> Any:
    names = _param_names(original, drop_first=False)

    def dispatch_cg_and_sync_dp(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        bound = dict(zip(names, args, strict=False))
        bound.update(kwargs)
        guard_call("G4", DISPATCH, _record_dispatch, result, bound)
        return result

    return mark(dispatch_cg_and_sync_dp, original)


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    mod = importlib.import_module(SPEC_MODULE)
    base = getattr(mod, "DraftModelSpeculator", None)
    helper_name = next((h for h in HELPERS if base is not None and h in base.__dict__), None)
    builder = mod.__dict__.get(BUILDER)
    if helper_name is None or not callable(builder):
        skipped.append(f"G4 (no shared draft-metadata helper or {BUILDER} in {SPEC_MODULE})")
        return
    site = f"DraftModelSpeculator.{helper_name}"
    patcher.replace(base, helper_name, make_helper(base.__dict__[helper_name], site))
    patcher.replace(mod, BUILDER, make_builder(builder))
    installed.append(f"G4@{site}->{BUILDER}")
    try:
        dp_mod = importlib.import_module(DP_MODULE)
        dispatch = getattr(dp_mod, DISPATCH)
    except Exception as exc:  # noqa: BLE001
        if "batch_desc" not in inspect.signature(base.__dict__[helper_name]).parameters:
            skipped.append(f"G4 descriptor recording ({type(exc).__name__}: {exc})")
        return
    wrapper = make_dispatch(dispatch)
    patcher.rebind_everywhere(dp_mod, DISPATCH, wrapper)
