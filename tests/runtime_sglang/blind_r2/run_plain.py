"""Run every blind_r2 scenario with no guard installed.

Usage (CPU only, with the runtime venv's python):
  PYTHONPATH=/tmp/sgrt:/tmp/sgrt/target:/tmp/sgrt/deps python run_plain.py [name ...]

Imports each scenario file by path, calls scenario(), prints
name, EXPECT, ok/error (and the small JSON result)."""

import importlib.util
import json
import os
import sys
import traceback

import tvfix  # noqa: F401  (first: torchvision op schemas)

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def scenario_files(names=None):
    for fn in sorted(os.listdir(HERE)):
        if not fn.endswith(".py") or fn.startswith("_") or fn == "run_plain.py":
            continue
        if names and fn[:-3] not in names:
            continue
        yield fn


def main(argv):
    names = set(argv[1:]) or None
    failures = 0
    for fn in scenario_files(names):
        name = fn[:-3]
        path = os.path.join(HERE, fn)
        try:
            spec = importlib.util.spec_from_file_location(f"blind_r2_{name}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            result = mod.scenario()
            json.dumps(result)
            print(f"{name}\t{mod.EXPECT}\tok\t{json.dumps(result)}", flush=True)
        except Exception as e:  # noqa: BLE001
            failures += 1
            print(f"{name}\t{getattr(locals().get('mod'), 'EXPECT', '?')}\terror\t"
                  f"{type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
