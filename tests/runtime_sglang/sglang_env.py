"""Where SGLang's real code is for the guard tests, and how a subprocess gets it.

SGLang 0.5.23 and the modules its ForwardBatch, plugin loader and FlashInfer backend import are installed
--no-deps into a folder of their own by .ci/runtime-env.sh (SPECGUARD_SGLANG_RT_PATH); the tests run them in
subprocesses of the runtime venv's python with that folder first on PYTHONPATH, so the rest of the test session
never imports SGLang. Each subprocess loads plugins once, as an SGLang process does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SGLANG_RT = Path(
    os.environ.get("SPECGUARD_SGLANG_RT_PATH")
    or Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard")) / "sglang-0.5.23-rt"
)
ENV_VARS = ("SGLANG_SPECGUARD", "SGLANG_SPECGUARD_STATS_INTERVAL", "SGLANG_PLUGINS")


def declare_torchvision_ops() -> None:
    """Declare the schemas of the two compiled torchvision ops whose fake kernels torchvision's import registers,
    where its compiled ops cannot load (the public torchvision build needs CUDA torch; the CPU build is served
    only by PyTorch's own index). No kernel is given: calling them fails as without torchvision's ops. SGLang's
    import chain reaches torchvision through its multimodal configs; no test calls it."""
    import importlib.util

    import torch

    if "_torchvision_schemas" in globals():
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    compiled = next(Path(spec.submodule_search_locations[0]).glob("_C*.so"), None)
    try:
        if compiled is not None:
            torch.ops.load_library(str(compiled))
            return
    except OSError:
        pass
    lib = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    globals()["_torchvision_schemas"] = lib  # a Library unregisters its definitions when collected


def run_driver(cases: list[Path], mode: str | None, *, timeout: int = 600, **env_over: str) -> dict:
    """Run `driver.py` on scenario files in one SGLang process with SGLANG_SPECGUARD=mode (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(SGLANG_RT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["SGLANG_SPECGUARD_STATS_INTERVAL"] = "off"
    if mode is not None:
        env["SGLANG_SPECGUARD"] = mode
    env.update(env_over)
    proc = subprocess.run(
        [sys.executable, str(HERE / "driver.py"), *map(str, cases)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("REPORT ")), None)
    if proc.returncode != 0 or line is None:
        raise AssertionError(f"driver failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    report = json.loads(line[len("REPORT ") :])
    report["log"] = proc.stderr
    return report
