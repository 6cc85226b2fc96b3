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
from specguard.deploy.source import SourceTree

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


def _check_summary(root: Path) -> CheckSummary:
    from specguard.analysis.engine import check_paths  # deferred: only when there is a tree to check

    result = check_paths([root])
    counts = Counter(f.code for f in result.findings)
    return CheckSummary(str(root), result.files, dict(sorted(counts.items())), list(result.errors))


def _runtime_checks() -> tuple[list[RuntimeCheck], str | None]:
    """Which runtime-guard checks would install here, as specguard.runtime reports them."""
    try:
        from specguard.runtime import describe_checks  # type: ignore[attr-defined]
    except ImportError:
        return [], "specguard.runtime does not list its checks in this build"
    checks = []
    for item in describe_checks():
        checks.append(RuntimeCheck(str(item.name), bool(item.would_install), str(item.detail)))
    return checks, None


def diagnose(vllm_source: str | None = None) -> Report:
    packages = {label: _version(names) for label, names in PACKAGES.items()}
    root: Path | None
    root = SourceTree.open(vllm_source).root if vllm_source is not None else installed_vllm_dir()
    check = _check_summary(root) if root is not None else None
    runtime, note = _runtime_checks()
    return Report(
        python=f"{platform.python_version()} ({sys.executable})",
        specguard=specguard.__version__,
        packages=packages,
        vllm_dir=str(root) if root else None,
        check=check,
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
    for rc in report.runtime:
        mark = "installs" if rc.would_install else "skipped "
        lines.append(f"runtime guard: {mark} {rc.name}: {rc.detail}")
    return "\n".join(lines)
