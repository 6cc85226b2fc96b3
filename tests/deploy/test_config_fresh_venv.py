"""The `specguard config --vllm-version` examples of the README and docs/config.md, run as a first-time user runs
them: specguard installed from this checkout into a new venv (no vLLM there, no source folder given), an empty user
cache, and pip fetching the release's wheel. pip is pointed at the test cache's wheel folder (PIP_NO_INDEX,
PIP_FIND_LINKS: pip's own configuration, which --vllm-version leaves to pip), so the download path is the real one
without the network."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SPECGUARD_TEST_CACHE", Path.home() / ".cache" / "specguard"))
ENV_NOTE = "judged with these variables unset"


# Where the examples are: (page, the text their part starts at, the text it ends before)
PAGES = [
    ("README.md", "## `specguard config` and `specguard doctor`", "\n## "),
    ("docs/config.md", "# `specguard config` and `specguard doctor`", "\n## `specguard doctor`"),
]


def _sections() -> list[str]:
    found = []
    for page, start, end in PAGES:
        doc = (REPO / page).read_text(encoding="utf-8")
        begin = doc.index(start)
        found.append(doc[begin : doc.index(end, begin + len(start))])
        assert "$ specguard config" in found[-1] and "--vllm-version" in found[-1], f"{page} shows no example run"
    return found


def _examples() -> list[tuple[str, int, list[str]]]:
    """(command, exit code, expected output lines) for each console example using --vllm-version."""
    out: list[tuple[str, int, list[str]]] = []
    for block in (b for s in _sections() for b in re.findall(r"```console\n(.*?)```", s, flags=re.DOTALL)):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.startswith("$ specguard config") or "--vllm-version" not in line:
                continue
            command = line[2:]
            while command.rstrip().endswith("\\"):
                command = command.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
            command, _, comment = command.partition("#")
            exit_code = int(re.search(r"exit (\d)", comment).group(1)) if "exit" in comment else None  # type: ignore[union-attr]
            expected: list[str] = []
            while i < len(lines) and not lines[i].startswith("$ "):
                expected.append(lines[i])
                i += 1
            assert exit_code is not None, f"the docs give no exit code for: {command}"
            out.append((command.strip(), exit_code, expected))
    return out


def _flat(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def test_the_documented_examples_run_from_a_fresh_venv(tmp_path: Path, source_dir: Callable[[str], Path]) -> None:
    examples = _examples()
    versions = {re.search(r"--vllm-version (\S+)", c).group(1) for c, _, _ in examples}  # type: ignore[union-attr]
    assert {"0.28.0", "0.33.0"} <= versions and any("--strict" in c for c, _, _ in examples)
    for version in versions:
        source_dir(version)  # the test cache holds the wheel pip is pointed at
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{REPO}[config]"], capture_output=True, text=True
    )
    assert install.returncode == 0, install.stderr[-3000:]
    assert subprocess.run([str(python), "-c", "import vllm"], capture_output=True).returncode != 0  # no vLLM there

    xdg = tmp_path / "xdg"
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(xdg),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(CACHE / "wheels"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for command, exit_code, expected in examples:
        proc = subprocess.run(shlex.split(command), capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
        shown = (proc.stdout + proc.stderr).replace(str(xdg / "specguard"), "~/.cache/specguard")
        assert proc.returncode == exit_code, (command, shown[-3000:])
        assert _flat(expected) in _flat(shown.splitlines()), (command, shown[-3000:])
        if "--format json" not in command:  # a text run prints its note where the example shows it (json: stderr)
            assert (ENV_NOTE in shown) == (ENV_NOTE in "\n".join(expected)), (command, shown[-3000:])
    # Each release was fetched once, as Python files only, and is reused.
    for version in versions:
        tree = xdg / "specguard" / "vllm-src" / version
        assert (tree / ".complete").is_file() and (tree / "vllm" / "__init__.py").is_file()
        assert {p.suffix for p in tree.rglob("*") if p.is_file() and p.name != ".complete"} == {".py"}
