"""Install every guard whose target exists in this process's engine (vLLM or SGLang, frameworks.py) and
FlashInfer, and log one line saying which were installed, which were skipped (with the reason), and which of the
installed ones can fire on this release. On an engine release or a flashinfer-python release outside what the
guard was assessed on (coverage.ASSESSED, frameworks.SGLANG.assessed) raise mode runs as warn: an invariant,
signature or dtype rule the project has not read in that release's code may have changed, and a guard that
raises on it would turn a healthy server into an outage. Imported only when the guard is on."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from dataclasses import dataclass, field

from specguard.runtime import batch_mode, coverage, metrics, reporting, vllm_env
from specguard.runtime.frameworks import VLLM, Framework
from specguard.runtime.patching import Patcher
from specguard.runtime.policy import POLICY


@dataclass
class State:
    patcher: Patcher = field(default_factory=Patcher)
    installed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    coverage: coverage.Coverage | None = None
    active: bool = False
    pid: int | None = None  # the process these lines are for: a forked child inherits the patches, not the lines
    stats_interval: float | None = None
    framework: Framework = VLLM


STATE = State()
_lock = threading.Lock()
_fork_hook_registered = False


NOT_INSTALLED = "not installed"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def _detect_versions(framework: Framework) -> dict[str, str]:
    # the packages actually imported (a PYTHONPATH copy can shadow the installed distribution)
    versions: dict[str, str] = {}
    for dist, module in ((framework.dist, framework.dist), ("flashinfer-python", "flashinfer")):
        try:
            versions[dist] = str(getattr(importlib.import_module(module), "__version__", None) or _version(dist))
        except Exception:  # noqa: BLE001 -- not importable here (vLLM's CPU build has no FlashInfer)
            versions[dist] = _version(dist)
    return versions


def startup_line(mode: str) -> str:
    framework = STATE.framework
    version = STATE.versions.get(framework.dist, "?")
    clause = coverage.describe(version, STATE.coverage) if STATE.coverage else _unplanned_clause(framework, version)
    why = f" ({POLICY.mode_reason})" if POLICY.mode_reason else ""
    flashinfer = STATE.versions.get("flashinfer-python", NOT_INSTALLED)
    if flashinfer != NOT_INSTALLED and not coverage.flashinfer_assessed(flashinfer):
        flashinfer += f" (not assessed: the table covers {', '.join(coverage.ASSESSED.flashinfer)})"
    return (
        f"specguard runtime guard ({framework.env_var} mode={mode}, pid {os.getpid()}){why} for {framework.name} "
        f"{version}, flashinfer-python {flashinfer}: "
        f"installed [{', '.join(STATE.installed) or 'none'}]; skipped [{'; '.join(STATE.skipped) or 'none'}]; " + clause
    )


def _unplanned_clause(framework: Framework, version: str) -> str:
    """An engine without a table of regression nets (SGLang): every installed check is live."""
    assessed = "" if framework.is_assessed(version) else f" (not assessed: {framework.assessed_range()})"
    return f"on {framework.name} {version}{assessed} every installed check is live"


def _after_fork_in_child() -> None:
    """A forked child (vLLM's engine core and workers under the `fork` start method) inherits the patches,
    and vLLM does not load plugins there again (`load_general_plugins` runs once per interpreter). The child
    gets its own counters, a lock no parent thread can be holding, its startup line and its counter lines."""
    global _lock
    _lock = threading.Lock()
    POLICY._lock = threading.Lock()
    if not STATE.active:
        return
    parent, STATE.pid = STATE.pid, os.getpid()
    POLICY.reset_counters()
    metrics.after_fork()
    reporting.emit(logging.INFO, "%s", startup_line(POLICY.mode) + f" (patches inherited from pid {parent})")
    reporting.arm(STATE.stats_interval)


def effective_mode(requested: str, versions: dict[str, str], framework: Framework = VLLM) -> tuple[str, str]:
    """(the mode the checks run in, why it differs from the requested one, or ""), from the versions
    _detect_versions found. A FlashInfer that is not installed (vLLM's CPU build) installs no FlashInfer check."""
    if requested != "raise":
        return requested, ""
    outside = []
    version = versions.get(framework.dist, "")
    if not framework.is_assessed(version):
        outside.append(
            f"{framework.name} {version} is outside the releases this guard was assessed on "
            f"({framework.assessed_range()})"
        )
    flashinfer = versions.get("flashinfer-python", NOT_INSTALLED)
    if flashinfer != NOT_INSTALLED and not coverage.flashinfer_assessed(flashinfer):
        outside.append(
            f"flashinfer-python {flashinfer} is outside the releases this guard was assessed on "
            f"({', '.join(coverage.ASSESSED.flashinfer)})"
        )
    if not outside:
        return requested, ""
    return "warn", (
        f"asked for raise; {' and '.join(outside)}, so violations are logged and counted, not raised, "
        "except those that would touch memory outside their buffers"
    )


def install(mode: str, stats_interval: float | None = None, framework: Framework = VLLM) -> State:
    global _fork_hook_registered
    with _lock:
        if STATE.active:
            POLICY.mode, POLICY.mode_reason = effective_mode(mode, STATE.versions, STATE.framework)
            return STATE
        STATE.framework = framework
        STATE.versions = _detect_versions(framework)
        POLICY.mode, POLICY.mode_reason = effective_mode(mode, STATE.versions, framework)
        adapters: set[str] = set()
        for key, label, module in framework.adapters:
            before = len(STATE.installed)
            try:
                adapter = importlib.import_module(module)
                adapter.install(STATE.patcher, STATE.installed, STATE.skipped)
            except Exception as exc:  # noqa: BLE001 -- a missing or changed target skips its checks, never serving
                STATE.skipped.append(f"{label} ({type(exc).__name__}: {exc})")
            if len(STATE.installed) > before:
                adapters.add(key)
        if framework is VLLM:
            STATE.coverage = coverage.coverage(STATE.versions.get("vllm", ""), adapters)
        STATE.active = True
        STATE.pid = os.getpid()
        STATE.stats_interval = stats_interval
        if not _fork_hook_registered:
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _fork_hook_registered = True
        if framework is VLLM:
            vllm_env.keep_out_of_compile_key()
        try:
            metrics.setup()
        except Exception as exc:  # noqa: BLE001 -- no /metrics for the guard, never no server
            POLICY.guard_error("metrics", metrics.DIR_ENV, exc)
        reporting.emit(logging.INFO, "%s", startup_line(POLICY.mode))
        reporting.arm(stats_interval)
        return STATE


def uninstall() -> None:
    """Put every original back and take specguard out of vLLM's environment registry, compile key and
    `/metrics` (tests; a process that wants the guard off again)."""
    with _lock:
        STATE.patcher.restore()
        vllm_env.unregister_env_vars()
        metrics.teardown()
        batch_mode.forget()
        STATE.installed.clear()
        STATE.skipped.clear()
        STATE.coverage = None
        STATE.active = False
        STATE.pid = None
        POLICY.mode = "off"
        POLICY.mode_reason = ""
        reporting.disarm()
