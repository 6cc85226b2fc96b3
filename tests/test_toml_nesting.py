"""TOML nested too deeply (issue 26 item 7): every TOML specguard reads (pyproject settings, --config, a rule pack,
the hazard catalogue, ruff's configuration for --fix) refuses a document nested past a small depth, before
tomllib parses it where the nesting is a long dotted key (tomllib's cost grows with the square of its length).

A dotted table header 20,000 parts deep (40 KB) was an internal RecursionError after parsing; the same header
followed by 10,000 short keys kept tomllib busy for over 30 s. Every run is a child under RLIMIT_AS (512 MiB) and
RLIMIT_CPU: a run that spins is killed there and the test sees it; nothing is timed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bounded import limits
from tests.test_cache import tree

MEMORY = 512 << 20
CPU_SECONDS = 20  # a check of this tree takes about a second of CPU
HANG_GUARD = 300  # only a blocked read reaches it


def bounded(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "xdg")}
    return subprocess.run(
        [sys.executable, "-m", "specguard", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )


def _chain(parts: int, part: str = "a", dot: str = ".") -> str:
    return dot.join([part] * parts)


# Each is a document nested far too deeply for a configuration, under the table `prefix` names.
DEEP = {
    # The case: a dotted table header.
    "deep-header": lambda prefix: f"[{prefix}.{_chain(20_000)}]\nx = 1\n",
    # A long header, then many keys: tomllib copies the header's key for each of them.
    "long-header-many-keys": lambda prefix: (
        f"[{prefix}.{_chain(20_000)}]\n" + "".join(f"k{i} = 1\n" for i in range(10_000))
    ),
    "deep-dotted-key": lambda prefix: f"[{prefix}]\n{_chain(20_000)} = 1\n",
    "quoted-parts-spaced-dots": lambda prefix: (
        f"[{prefix}]\n{_chain(20_000, part=chr(34) + 'a' + chr(34), dot=' . ')} = 1\n"
    ),
    "array-of-tables-header": lambda prefix: f"[[{prefix}.{_chain(20_000)}]]\nx = 1\n",
    # Short dotted keys inside nested inline tables: each is allowed, together they nest 1,200 deep.
    "dotted-keys-in-inline-tables": lambda prefix: (
        f"[{prefix}]\nx = " + "".join("{" + _chain(30) + " = " for _ in range(40)) + "1" + "}" * 40 + "\n"
    ),
}


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize("where", ["pyproject", "config", "rule-pack", "catalogue"])
def test_deeply_nested_toml_is_one_line_and_exit_2(tmp_path: Path, where: str, shape: str) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    if where == "pyproject":
        (root / "pyproject.toml").write_text(DEEP[shape]("tool.specguard"))
        out, path, what = bounded(root, "check", "fork", "--no-cache"), root / "pyproject.toml", "configuration"
    elif where == "config":
        (root / "settings.toml").write_text(DEEP[shape]("lint"))
        out = bounded(root, "check", "fork", "--no-cache", "--config", "settings.toml")
        path, what = Path("settings.toml"), "configuration"
    elif where == "rule-pack":
        (root / "pack.toml").write_text(DEEP[shape]("metadata"))
        out = bounded(root, "check", "fork", "--no-cache", "--rule-pack", "pack.toml")
        path, what = Path("pack.toml"), "rule pack"
    else:
        (root / "hazards.toml").write_text(DEEP[shape]("hazard"))
        out = bounded(root, "config", "--hazards", "hazards.toml", "--", "m")
        path, what = Path("hazards.toml"), "hazard catalogue"
    assert out.stderr.splitlines() == [f"specguard: error: {path}: {what} is not valid TOML: nested too deeply"]
    assert out.returncode == 2 and out.stdout == ""


def test_a_deep_ruff_configuration_is_a_note_and_fixes_go_on(tmp_path: Path) -> None:
    """ruff's configuration only sets the line length of a fix: a deep one is named and the fix still happens."""
    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "ruff.toml").write_text(DEEP["long-header-many-keys"]("lint"))
    out = bounded(root, "check", "fork", "--no-cache", "--diff")
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    assert f"{root / 'ruff.toml'}: ruff configuration is not valid TOML: nested too deeply" in out.stderr


def test_a_configuration_nested_as_deep_as_allowed_is_read(tmp_path: Path) -> None:
    """The limit leaves room for any real configuration: keys of 8 parts in tables 8 deep are fine."""
    root = tree(tmp_path, "DraftModelSpeculator")
    extra = f"[tool.other.{_chain(8)}]\n{_chain(8)} = " + "[" * 8 + "1" + "]" * 8 + "\n"
    (root / "pyproject.toml").write_text(extra + '[tool.specguard]\nselect = ["SG1"]\n')
    out = bounded(root, "check", "fork", "--no-cache")
    assert out.returncode == 1, out.stderr
