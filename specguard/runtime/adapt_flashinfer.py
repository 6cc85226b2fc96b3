"""G1 on FlashInfer's paged wrappers and its ragged prefill wrapper (flashinfer-python 0.7.2.post1 and 0.7.4):
`plan()` records the query layout it was given, host-side; `run()` checks `q.shape[0]` against it before the kernel.

Prefill records qo_indptr[-1] from the host indptr `plan()` receives (vLLM and SGLang pass CPU copies); a device
indptr is skipped, never read. Decode needs no value at all: its batch is `indptr.shape[0] - 1`.

FlashInfer's `fast_decode_plan(wrapper, ...)`, which vLLM calls and SGLang installs per instance
(`wrapper.begin_forward = partial(fast_decode_plan, wrapper)`), plans without `plan()`: it is wrapped to record
too, in FlashInfer and in every loaded module that imported it, so SGLang's test of which planner a wrapper uses
(`begin_forward.func == fast_decode_plan`) keeps its answer. A wrapper whose instance holds any other planner the
guard did not wrap is not judged (its recorded layout could be stale).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from typing import Any

from specguard.runtime import invariants as inv
from specguard.runtime.host import host_int, host_last_int, rows
from specguard.runtime.patching import Patcher, Skip, arg_binder, guard_call, is_wrapped, mark, run_check
from specguard.runtime.policy import POLICY

PREFILL = ("flashinfer.prefill", "BatchPrefillWithPagedKVCacheWrapper")
RAGGED = ("flashinfer.prefill", "BatchPrefillWithRaggedKVCacheWrapper")  # SGLang's and vLLM's MLA prefill
DECODE = ("flashinfer.decode", "BatchDecodeWithPagedKVCacheWrapper")
RECORD_ATTR = "_specguard_planned_layout"
LEGACY_DECODE_ARGS = "_BATCH_DECODE_PLAN_LEGACY_POS_ARGS"  # flashinfer.decode's names for plan()'s *args
# Backends whose decode kernels tile a per-request query length different from the planned one.
_FLEXIBLE_DECODE_BACKENDS = ("trtllm-gen", "cute-dsl")
# Packages whose modules may hold FlashInfer's planners under their own names (`from flashinfer import ...`).
FRAMEWORKS = ("flashinfer", "vllm.", "sglang.")


def _prefill_recorder(plan: Any) -> Any:
    get_qo_indptr = arg_binder(plan, "qo_indptr")

    def record(self: Any, args: tuple, kwargs: dict) -> None:
        qo_indptr = get_qo_indptr(args, kwargs)
        if qo_indptr is None:
            raise Skip("plan() called without qo_indptr")
        reqs = qo_indptr.shape[0] - 1
        setattr(self, RECORD_ATTR, ("prefill", host_last_int(qo_indptr, "plan() qo_indptr"), reqs))

    return record


def _decode_recorder(plan: Any) -> Any:
    # Bound the way plan() binds it: a caller may pass q_len_per_req positionally. flashinfer-python
    # 0.7.2.post1 and 0.7.4 take the optional arguments after page_size as `*deprecated_positional_args` and
    # map them by their own list of names; older releases name them as parameters.
    legacy = getattr(sys.modules.get(getattr(plan, "__module__", "")), LEGACY_DECODE_ARGS, ())
    get_indptr = arg_binder(plan, "indptr")
    get_q_len = arg_binder(plan, "q_len_per_req", 1, star_args_names=tuple(legacy))

    def record(self: Any, args: tuple, kwargs: dict) -> None:
        indptr = get_indptr(args, kwargs)
        if indptr is None:
            raise Skip("plan() called without indptr")
        q_len = host_int(get_q_len(args, kwargs), "plan() q_len_per_req")
        setattr(self, RECORD_ATTR, ("decode", indptr.shape[0] - 1, q_len))

    return record


def _planned(self: Any) -> tuple:
    own = self.__dict__.get("begin_forward") if hasattr(self, "__dict__") else None
    if isinstance(own, functools.partial) and not is_wrapped(own.func):
        raise Skip(f"this wrapper plans through {getattr(own.func, '__qualname__', own.func)!r}, which is not recorded")
    record = getattr(self, RECORD_ATTR, None)
    if record is None:
        raise Skip("run() without a plan() the guard recorded")
    return record


def _check_prefill_run(self: Any, q: Any, site: str) -> inv.Violation | None:
    _, planned_rows, reqs = _planned(self)
    return inv.check_prefill_rows(rows(q), planned_rows, site=site, subject=type(self).__name__, planned_reqs=reqs)


def _check_decode_run(self: Any, q: Any, site: str) -> inv.Violation | None:
    _, batch, q_len = _planned(self)
    exact = getattr(self, "_backend", None) not in _FLEXIBLE_DECODE_BACKENDS
    return inv.check_decode_rows(rows(q), batch, q_len, exact=exact, site=site, subject=type(self).__name__)


def make_plan(original: Any, make_recorder: Any, site: str) -> Any:
    record = make_recorder(original)

    def plan(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Forget the previous layout first: a failed plan must not leave a stale one for run() to trust.
        guard_call("G1", site, setattr, self, RECORD_ATTR, None)
        result = original(self, *args, **kwargs)
        guard_call("G1", site, record, self, args, kwargs)
        return result

    return mark(plan, original)


def make_run(original: Any, check: Any, site: str) -> Any:
    counter = POLICY.site("G1", site)
    get_q = arg_binder(original, "q")

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        run_check(counter, check, self, get_q(args, kwargs), site)
        return original(self, *args, **kwargs)

    return mark(run, original)


def _install_wrapper(
    patcher: Patcher,
    module: str,
    cls_name: str,
    make_recorder: Any,
    check: Any,
    installed: list[str],
    skipped: list[str],
) -> None:
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except Exception as exc:  # noqa: BLE001
        skipped.append(f"G1@{cls_name} ({type(exc).__name__}: {exc})")
        return
    plan, run = cls.__dict__.get("plan"), cls.__dict__.get("run")
    if not (inspect.isfunction(plan) and inspect.isfunction(run)):
        skipped.append(f"G1@{cls_name} (no plan/run functions)")
        return
    if is_wrapped(run):
        installed.append(f"G1@{cls_name}.plan/run")
        return
    site = f"{cls_name}.run"
    new_plan = make_plan(plan, make_recorder, f"{cls_name}.plan")
    new_run = make_run(run, check, site)
    patcher.replace(cls, "plan", new_plan)
    patcher.replace(cls, "run", new_run)
    # Aliases bound at class creation still point at the originals.
    if cls.__dict__.get("begin_forward") is plan:
        patcher.replace(cls, "begin_forward", new_plan)
    rrl = cls.__dict__.get("run_return_lse")
    if isinstance(rrl, functools.partialmethod) and rrl.func is run:
        patcher.replace(cls, "run_return_lse", functools.partialmethod(new_run, *rrl.args, **rrl.keywords))
    installed.append(f"G1@{cls_name}.plan/run")


def wrap_planner(patcher: Patcher, module: Any, name: str, make_recorder: Any, prefixes: tuple[str, ...]) -> bool:
    """Make the planning function `module.name(wrapper, ...)` record like `plan()`, in its module and in every
    loaded module under `prefixes` that imported it by name. False when the module has no such function."""
    original = module.__dict__.get(name)
    if not inspect.isfunction(original) or is_wrapped(original):
        return is_wrapped(original)
    new = make_plan(original, make_recorder, name)
    patcher.rebind_everywhere(module, name, new, prefix=prefixes)
    patcher.replace(module, name, new)
    return True


def install(patcher: Patcher, installed: list[str], skipped: list[str]) -> None:
    _install_wrapper(patcher, *PREFILL, _prefill_recorder, _check_prefill_run, installed, skipped)
    _install_wrapper(patcher, *RAGGED, _prefill_recorder, _check_prefill_run, installed, skipped)
    _install_wrapper(patcher, *DECODE, _decode_recorder, _check_decode_run, installed, skipped)
    decode = sys.modules.get(DECODE[0])
    if decode is not None and wrap_planner(patcher, decode, "fast_decode_plan", _decode_recorder, FRAMEWORKS):
        installed.append("G1@fast_decode_plan")
