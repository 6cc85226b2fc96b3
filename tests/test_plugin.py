"""An out-of-tree plugin subclassing the installed vLLM's speculators (issue 12 item 8), checked for real.

The test venv (.ci/runtime-env.sh) has vLLM 0.33.0 installed; vLLM 0.28.0's installed code sits beside it and is
put first on PYTHONPATH for the other variant. specguard locates the bases in whichever vLLM the Python running it
would import, reads them from disk, and never imports vLLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

OLD_VLLM = Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard")) / "vllm-0.28.0"

DRAFTER = """
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator


    class MyDrafter(DFlashSpeculator):
        def propose(self, num_reqs):
            return build_attn_metadata(num_reqs=num_reqs)

        def _build_attn_metadata(self, num_reqs, batch_desc):
            return None
"""
# AutoRegressiveSpeculator exists in vLLM 0.28.0 only (0.33.0 split it into standalone and target-dependent ones)
AR_DRAFTER = """
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
    from vllm.v1.worker.gpu.spec_decode.autoregressive.speculator import AutoRegressiveSpeculator


    class MyARDrafter(AutoRegressiveSpeculator):
        def propose(self, num_reqs):
            return build_attn_metadata(num_reqs=num_reqs)
"""
# Checks the plugin, then reports whether anything of vLLM got imported.
RUN = """
import sys
from specguard.cli import main
code = main(sys.argv[1:])
print("IMPORTED-VLLM", sorted(m for m in sys.modules if m == "vllm" or m.startswith("vllm.")), file=sys.stderr)
sys.exit(code)
"""


def plugin(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "myplug"
    folder.mkdir()
    for name, text in files.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return tmp_path


def check(cwd: Path, pythonpath: str | None = None) -> tuple[int, list[tuple[str, str, int]], list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-c", RUN, "check", "myplug", "--format", "json", "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    *stderr, imported = out.stderr.splitlines()
    assert imported == "IMPORTED-VLLM []", out.stderr  # located and read, never imported
    findings = [(Path(f["filename"]).name, f["code"], f["location"]["row"]) for f in json.loads(out.stdout)]
    return out.returncode, sorted(findings), stderr


def test_the_venv_has_vllm_0_33_0_installed_and_0_28_0_beside_it() -> None:
    assert metadata.version("vllm") == "0.33.0", "the test venv (.ci/runtime-env.sh) installs vLLM 0.33.0"
    assert (OLD_VLLM / "vllm" / "v1/worker/gpu/spec_decode/autoregressive/speculator.py").is_file()


def test_plugin_of_the_installed_vllm_gets_sg101_and_sg102_and_none_of_vllms_findings(tmp_path: Path) -> None:
    code, findings, stderr = check(plugin(tmp_path, drafter=DRAFTER))
    assert (code, findings, stderr) == (1, [("drafter.py", "SG101", 8), ("drafter.py", "SG102", 10)], [])


def test_plugin_against_vllm_0_28_0_on_pythonpath(tmp_path: Path) -> None:
    """0.28.0's own tree has SG102, SG103 and SG105 findings: none of them is reported, and a base only 0.28.0
    has resolves."""
    code, findings, stderr = check(plugin(tmp_path, drafter=DRAFTER, ar=AR_DRAFTER), str(OLD_VLLM))
    expected = [("ar.py", "SG101", 8), ("drafter.py", "SG101", 8), ("drafter.py", "SG102", 10)]
    assert (code, findings, stderr) == (1, expected, [])


@pytest.mark.parametrize(
    ("files", "exit_code"),
    [({"ar": AR_DRAFTER}, 0), ({"ar": AR_DRAFTER, "drafter": DRAFTER}, 1)],
    ids=["only-the-unresolved-plugin", "beside-a-resolved-one"],
)
def test_a_base_missing_from_the_installed_vllm_is_said_once_and_leaves_the_exit_code(
    tmp_path: Path, files: dict[str, str], exit_code: int
) -> None:
    code, findings, stderr = check(plugin(tmp_path, **files))
    assert code == exit_code and [f for f in findings if f[0] == "ar.py"] == []
    (note,) = stderr
    assert note.startswith(
        "specguard: note: cannot locate `vllm.v1.worker.gpu.spec_decode.autoregressive.speculator."
        "AutoRegressiveSpeculator`, an ancestor of `MyARDrafter` (myplug/ar.py:6)"
    ), note


def test_a_package_that_is_not_installed_at_all_is_said_once(tmp_path: Path) -> None:
    text = """
        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
        from forkdrafters_not_installed.base import ForkDrafter


        class One(ForkDrafter):
            def propose(self):
                return build_attn_metadata()


        class Two(ForkDrafter):
            def _build_attn_metadata(self):
                return None
    """
    code, findings, stderr = check(plugin(tmp_path, fork=text))
    assert (code, findings, len(stderr)) == (0, [], 1)
    assert "cannot locate `forkdrafters_not_installed.base.ForkDrafter`, an ancestor of `One`" in stderr[0]
