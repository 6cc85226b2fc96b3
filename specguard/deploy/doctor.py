"""`specguard doctor`: the environment as specguard sees it.

Versions come from installed distribution metadata, and the vLLM tree is located, not imported: doctor must work
on a laptop without a GPU, and importing vLLM or torch there is slow or fails.
"""

from __future__ import annotations

import json
import platform
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import specguard
from specguard.deploy.facts import installed_vllm_dir
from specguard.deploy.tree_check import TreeChecker
from specguard.program.tree import SourceTree

# Distribution names, in the order doctor prints them. flashinfer ships as flashinfer-python.
PACKAGES = {"vllm": ("vllm",), "flashinfer": ("flashinfer-python", "flashinfer"), "torch": ("torch",)}


@dataclass
class CheckSummary:
    target: str
    files: int
    findings: dict[str, int]
    errors: list[str]


@dataclass
class RuntimeCheck:
    name: str
    would_install: bool
    detail: str


@dataclass
class Report:
    python: str
    specguard: str
    packages: dict[str, str | None]
    vllm_dir: str | None
    check: CheckSummary | None
    runtime: list[RuntimeCheck] = field(default_factory=list)
    runtime_note: str | None = None


def _version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _check_summary(root: Path, check: TreeChecker) -> CheckSummary:
    result = check(root)
    counts = Counter(f.code for f in result.findings)
    return CheckSummary(str(root), result.files, dict(sorted(counts.items())), list(result.errors))


# Run in a child process: installing the guard imports vLLM, FlashInfer and torch, which doctor itself must not.
_PROBE = """
import json, os
os.environ["VLLM_SPECGUARD"] = "warn"
from specguard.runtime import installed_checks, register
register()
installed, skipped = installed_checks()
print("SPECGUARD-DOCTOR " + json.dumps({"installed": installed, "skipped": skipped}))
"""
PROBE_TIMEOUT_S = 300


def _runtime_checks() -> tuple[list[RuntimeCheck], str | None]:
    """Which runtime-guard checks would install here: the guard really installs, in a throwaway process."""
    import os
    import subprocess

    from specguard.runtime.policy import ENV_VAR, SpecGuardConfigError, parse_mode

    try:
        mode = parse_mode(os.environ.get(ENV_VAR))
        current = (
            f"{ENV_VAR}={os.environ.get(ENV_VAR, '')!r}: {mode}" if ENV_VAR in os.environ else f"{ENV_VAR} unset: off"
        )
    except SpecGuardConfigError as exc:
        current = str(exc)
    # The child must import this same specguard, installed or not.
    root = str(Path(specguard.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return [], f"{current}; probing which checks would install timed out after {PROBE_TIMEOUT_S}s"
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("SPECGUARD-DOCTOR ")), None)
    if proc.returncode != 0 or line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"{current}; probing which checks would install failed: {last}"
    data = json.loads(line.removeprefix("SPECGUARD-DOCTOR "))
    checks = [RuntimeCheck(name, True, "") for name in data["installed"]]
    for entry in data["skipped"]:
        name, _, reason = entry.partition(" (")
        checks.append(RuntimeCheck(name, False, reason.removesuffix(")")))
    return checks, current


def diagnose(check: TreeChecker, vllm_source: str | None = None) -> Report:
    """The environment, with `specguard check` (run by `check`) summarized on the served vLLM."""
    packages = {label: _version(names) for label, names in PACKAGES.items()}
    root: Path | None
    root = SourceTree.open(vllm_source).root if vllm_source is not None else installed_vllm_dir()
    summary = _check_summary(root, check) if root is not None else None
    runtime, note = _runtime_checks()
    return Report(
        python=f"{platform.python_version()} ({sys.executable})",
        specguard=specguard.__version__,
        packages=packages,
        vllm_dir=str(root) if root else None,
        check=summary,
        runtime=runtime,
        runtime_note=note,
    )


def to_json(report: Report) -> str:
    data: dict[str, Any] = asdict(report)
    return json.dumps(data, indent=2)


def to_text(report: Report) -> str:
    lines = [f"python      {report.python}", f"specguard   {report.specguard}"]
    for label, version in report.packages.items():
        lines.append(f"{label:<11} {version or 'not installed'}")
    if report.vllm_dir:
        lines.append(f"vllm source {report.vllm_dir}")
    if report.check is None:
        lines.append("specguard check: skipped (no vLLM installed; pass --vllm-source DIR to check a tree)")
    else:
        c = report.check
        if c.findings:
            detail = ", ".join(f"{code} x{n}" for code, n in c.findings.items())
            total = sum(c.findings.values())
            noun = "finding" if total == 1 else "findings"
            lines.append(f"specguard check: {total} {noun} in {c.files} files ({detail})")
        else:
            lines.append(f"specguard check: no findings in {c.files} files")
        for err in c.errors:
            lines.append(f"  error: {err}")
    if report.runtime_note:
        lines.append(f"runtime guard: {report.runtime_note}")
    if report.runtime:
        lines.append("runtime guard checks that would install here (VLLM_SPECGUARD=1 or warn):")
    for rc in report.runtime:
        if rc.would_install:
            lines.append(f"  installs  {rc.name}")
        else:
            lines.append(f"  skipped   {rc.name}: {rc.detail}")
    return "\n".join(lines)
