"""Run every blind_r1 scenario with NO guard installed.

    PYTHONPATH=/tmp/sgrt:/tmp/sgrt/target:/tmp/sgrt/deps \
        python run_plain.py [name ...]   (the runtime venv python)

Imports each scenario module by path, calls scenario(), and prints
name, EXPECT and ok / error. Exit status 1 if any scenario raised.
Files starting with "_" and this runner are not scenarios.
"""

import importlib.util
import os
import sys
import traceback

for _p in ("/tmp/sgrt", "/tmp/sgrt/target", "/tmp/sgrt/deps"):
    if _p not in sys.path:
        sys.path.append(_p)

import tvfix  # noqa: E402,F401  (must come before sglang)

HERE = os.path.dirname(os.path.abspath(__file__))


def scenario_files(names=None):
    out = []
    for fn in sorted(os.listdir(HERE)):
        if not fn.endswith(".py") or fn.startswith("_") or fn == "run_plain.py":
            continue
        if names and fn[:-3] not in names:
            continue
        out.append(os.path.join(HERE, fn))
    return out


def load(path):
    name = "blind_r1_" + os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv):
    failures = 0
    rows = []
    for path in scenario_files(set(argv) or None):
        short = os.path.basename(path)[:-3]
        expect = "?"
        try:
            mod = load(path)
            expect = mod.EXPECT
            assert expect in ("caught", "passes"), expect
            assert isinstance(mod.WHY, str) and mod.WHY
            mod.scenario()
            status = "ok"
        except Exception as exc:  # report and continue
            failures += 1
            status = f"error: {type(exc).__name__}: {exc}"
            traceback.print_exc()
        rows.append((short, expect, status))
        print(f"{short:45s} {expect:7s} {status}", flush=True)
    print(f"\n{len(rows)} scenarios, {failures} errors")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
