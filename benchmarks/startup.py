#!/usr/bin/env python3
"""How long `specguard --version` takes against `ruff --version` and a bare interpreter, in one run.

    python benchmarks/startup.py [--repeat N]

Editors and pre-commit hooks start the tool for every file or commit, and ask its version first. The target
(issue 32): `specguard --version` under 30 ms on the project's 2-core machine. Both commands are run from the
interpreter's own bin/ folder (no shims), each as its own process, best of N wall-clock times; the interpreter
alone (`python -c pass`, with the same site-packages) is printed as the floor. Run it on an idle machine: nothing
here belongs in a unit test.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

TARGET_MS = 30.0


def best_ms(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    specguard = shutil.which("specguard", path=str(bin_dir))
    ruff = shutil.which("ruff", path=str(bin_dir))
    if specguard is None or ruff is None:
        print(f"needs specguard and ruff installed beside {sys.executable}", file=sys.stderr)
        return 2
    floor = best_ms([sys.executable, "-c", "pass"], args.repeat)
    ours = best_ms([specguard, "--version"], args.repeat)
    theirs = best_ms([ruff, "--version"], args.repeat)
    verdict = "PASS" if ours <= TARGET_MS else "MISS"
    print(f"python -c pass        {floor:6.1f} ms")
    print(f"ruff --version        {theirs:6.1f} ms")
    print(f"specguard --version   {ours:6.1f} ms   {ours / theirs:.1f}x ruff, {ours / floor:.2f}x the interpreter")
    print(f"target: specguard --version <= {TARGET_MS:.0f} ms: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
