"""One SGLang process: load plugins as SGLang does (entry points, SGLANG_SPECGUARD), then run each scenario file's
`scenario()` and print one REPORT line of JSON: per file, caught (the guard's violation was raised), passes, or
error, with what the scenario returned; the guard's installed checks and counters; what the patched targets are."""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path

from sglang_env import declare_torchvision_ops


def _load(path: Path):
    if str(path.parent) not in sys.path:  # a set's own support module sits beside its scenarios
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"scenario_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def main(paths: list[str]) -> None:
    declare_torchvision_ops()
    from sglang.srt.plugins import load_plugins

    load_plugins()
    import specguard.runtime as guard

    results = {}
    for path in map(Path, paths):
        try:
            returned = _load(path).scenario()
            results[path.stem] = {"outcome": "passes", "returned": _jsonable(returned)}
        except guard.SpecGuardViolation as exc:
            results[path.stem] = {"outcome": "caught", "check": exc.violation.check, "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 -- a scenario's own failure is a result, not a crash
            results[path.stem] = {"outcome": "error", "message": f"{type(exc).__name__}: {exc}"}
            traceback.print_exc()
    installed, skipped = guard.installed_checks()
    report = {
        "results": results,
        "installed": installed,
        "skipped": skipped,
        "stats": guard.stats(),
        "specguard_modules": sorted(m for m in sys.modules if m.startswith("specguard")),
    }
    print("REPORT " + json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
