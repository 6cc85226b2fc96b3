"""`specguard config` reads the served tree and nothing else (issue 26 item 4).

The served source's root is its real path; a symlink in it to inside it is followed, one out of it is not (a
module behind it is "not read", naming it; the analysis notes it), and the whole-tree walks stop at a budget of
files and bytes, after which each hazard that depends on what was left is "not judged". A served tree with
`vllm/config/zz -> /proc` used to take minutes and gigabytes. Each run is a child under RLIMIT_AS and RLIMIT_CPU,
so a walk out of the tree dies there instead of taking the machine; nothing is timed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork

from tests.bounded import limits

REPO = Path(__file__).resolve().parents[2]
DFLASH_DP2 = REPO / "examples" / "configs" / "dflash-dp2.yaml"  # CFG101 on 0.28.0: judged from check's findings
MEMORY = 1 << 30
CPU_SECONDS = 90
HANG_GUARD = 600  # only a blocked read reaches it


def _config(*argv: str, lowered: str = "") -> subprocess.CompletedProcess[str]:
    """`specguard config ARGV` in a bounded child; `lowered` sets budgets there, as only a test may."""
    code = (
        "from specguard.program import discover\n"
        "from specguard.program import tree as source\n"
        f"{lowered}"
        "from specguard.config_cli import config_main\n"
        f"raise SystemExit(config_main({list(argv)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        errors="replace",
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )


def _not_judged(out: str, why: str = "") -> str:
    """The codes of the hazards reported "not judged" (for a reason starting with `why`), as one string."""
    marker = f" not judged: {why}"
    return " ".join(line.partition(marker)[0] for line in out.splitlines() if marker in line)


@pytest.mark.parametrize("target", ["/proc", "/"])
def test_a_folder_link_out_of_the_served_tree_is_not_walked(
    target: str, tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    tree = fork(source_dir("0.28.0"), tmp_path)
    (tree / "config" / "zz").symlink_to(target)
    proc = _config(str(DFLASH_DP2), "--vllm-source", str(tree))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "data-parallel-size=2: CFG101 error" in out, out[-2000:]
    assert f"config/zz -> {target}; name its target on the command line" in out, out[-2000:]
    assert "Traceback" not in out


def test_a_module_linked_out_of_the_served_tree_is_not_read(tmp_path: Path, source_dir: Callable[[str], Path]) -> None:
    """config/parallel.py, where CFG105's check lives, is a link to an identical copy outside the tree: it is not
    read, so CFG105 is not judged (it was judged through the link), naming the file; the rest is judged."""
    tree = fork(source_dir("0.33.0"), tmp_path / "served")
    outside = tmp_path / "elsewhere" / "parallel.py"
    outside.parent.mkdir()
    shutil.copyfile(tree / "config" / "parallel.py", outside)
    (tree / "config" / "parallel.py").unlink()
    (tree / "config" / "parallel.py").symlink_to(outside)
    proc = _config("--vllm-source", str(tree), "--", "m", "-tp", "2", "-dcp", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1) and "Traceback" not in out, out[-2000:]
    assert "CFG105 error" not in out, "CFG105 was judged from a file outside the served tree"
    assert "CFG105" in _not_judged(out), out[-2000:]  # several hazards may share one line
    assert f"config/parallel.py (a link out of the served tree, to {outside.resolve()}; " in out, out[-2000:]


def test_past_the_served_trees_budget_what_depends_on_the_rest_is_not_judged(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """The search of the whole source stops at the budget (lowered here to 50 files): CFG105, judged from a
    statement found by searching every file, is not judged, and says why."""
    tree = fork(source_dir("0.33.0"), tmp_path)
    argv = ("--vllm-source", str(tree), "--", "m", "-tp", "2", "-dcp", "4")
    assert "decode-context-parallel-size=4: CFG105 error" in _config(*argv).stdout
    proc = _config(*argv, lowered="source.MAX_FILES = 50\n")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-2000:]
    assert "CFG105" in _not_judged(out, "the served source holds more than specguard reads of it (50 Python files")
    strict = _config("--strict", *argv, lowered="source.MAX_FILES = 50\n")
    assert strict.returncode == 3


def test_past_the_analysis_budget_a_finding_hazard_is_not_judged(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """`specguard check` over the served tree stops at its budget (lowered here to 50 files): CFG101, judged from
    the findings in DFlash's speculator classes, is not judged where their files were not analyzed."""
    tree = fork(source_dir("0.28.0"), tmp_path)
    proc = _config(str(DFLASH_DP2), "--vllm-source", str(tree), lowered="discover.MAX_FILES = 50\n")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-2000:]
    why = "`specguard check` read part of the served source only (50 Python files, its budget); it did not analyze "
    assert "CFG101" in _not_judged(out, why + "v1/worker/gpu/spec_decode/dflash/speculator.py"), out[-2000:]
