"""Install every guard whose target exists in this process's vLLM/FlashInfer, and log one line saying
which were installed and which were skipped (with the reason). Imported only when the guard is on."""

from __future__ import annotations

import importlib.metadata
import threading
from dataclasses import dataclass, field

from specguard.runtime.patching import Patcher
from specguard.runtime.policy import POLICY

ADAPTERS = (
    ("G1 FlashInfer paged wrappers", "specguard.runtime.adapt_flashinfer"),
    ("G1/G2/G3 FlashInfer MLA backend", "specguard.runtime.adapt_mla"),
    ("G3 KV-cache group merge", "specguard.runtime.adapt_kvspec"),
    ("G4 draft metadata helper", "specguard.runtime.adapt_speculator"),
)


@dataclass
class State:
    patcher: Patcher = field(default_factory=Patcher)
    installed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    active: bool = False


STATE = State()
_lock = threading.Lock()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _detect_versions() -> dict[str, str]:
    versions = {"flashinfer-python": _version("flashinfer-python")}
    try:  # the vllm actually imported (a PYTHONPATH copy can shadow the installed distribution)
        import vllm

        versions["vllm"] = str(getattr(vllm, "__version__", None) or _version("vllm"))
    except Exception:  # noqa: BLE001
        versions["vllm"] = _version("vllm")
    return versions


def install(mode: str) -> State:
    with _lock:
        POLICY.mode = mode
        if STATE.active:
            return STATE
        STATE.versions = _detect_versions()
        for label, module in ADAPTERS:
            try:
                adapter = importlib.import_module(module)
                adapter.install(STATE.patcher, STATE.installed, STATE.skipped)
            except Exception as exc:  # noqa: BLE001 -- a missing or changed target skips its checks, never serving
                STATE.skipped.append(f"{label} ({type(exc).__name__}: {exc})")
        STATE.active = True
        POLICY._log().info(
            "specguard runtime guard (VLLM_SPECGUARD mode=%s) for vLLM %s, flashinfer-python %s: "
            "installed [%s]; skipped [%s]",
            mode,
            STATE.versions.get("vllm"),
            STATE.versions.get("flashinfer-python"),
            ", ".join(STATE.installed) or "none",
            "; ".join(STATE.skipped) or "none",
        )
        return STATE


def uninstall() -> None:
    """Put every original back (tests; a process that wants the guard off again)."""
    with _lock:
        STATE.patcher.restore()
        STATE.installed.clear()
        STATE.skipped.clear()
        STATE.active = False
        POLICY.mode = "off"
