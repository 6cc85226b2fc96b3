"""Where .ci's venvs take torch from, decided from the environment (CONTRIBUTING.md, "Where torch comes from").

CPU torch is a speed choice, not a requirement: its wheel is a few hundred MB where the CUDA build pulls several GB
of nvidia-* packages, and the tests run on either. So the CPU build is taken where it can be had, and otherwise
whatever build pip's indexes serve is accepted:

1. A CPU wheel of the pinned version in a folder of `PIP_FIND_LINKS`: nothing is added (pip finds it there).
2. The CPU index answers (`SPECGUARD_TORCH_INDEX_URL`, by default PyTorch's own CPU index): it is added to pip's
   indexes (`--extra-index-url`). Set empty, no index is tried (an offline machine skips the probe).
3. Otherwise nothing is added: pip's own indexes (`PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, pip.conf) serve what they
   have, on Linux the CUDA build from the public index, and it is accepted.

pip prefers `2.13.0+cpu` to `2.13.0` for `torch==2.13.0` when both are offered (a local version sorts higher), so
adding the CPU index is enough to get the CPU build. Standard library only: .ci/install-torch.sh runs `torch-args`
with the system python; `build` and `requirements` run inside a venv.

    python3 .ci/torch_choice.py torch-args 2.13.0         # pip arguments, one a line (maybe none)
    VENV/bin/python .ci/torch_choice.py build              # "cpu" or "cuda X.Y": the torch installed there
    VENV/bin/python .ci/torch_choice.py requirements DIST NAME...  # DIST's requirements here, less NAMEs
"""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
ENV_INDEX = "SPECGUARD_TORCH_INDEX_URL"


@dataclass(frozen=True)
class Choice:
    args: list[str]  # what `pip install torch==V` gets besides pip's own configuration
    why: str  # one line for the log


def _local_cpu_wheel(find_links: str, version: str) -> Path | None:
    """A CPU wheel of torch `version` in one of the folders PIP_FIND_LINKS names (space-separated, as pip reads it)."""
    for entry in find_links.split():
        folder = Path(urlparse(entry).path if entry.startswith("file:") else entry)
        if folder.is_dir():
            for wheel in sorted(folder.glob(f"torch-{version}+cpu-*.whl")):
                return wheel
    return None


def reachable(index: str, timeout: float = 5.0) -> bool:
    """Whether `index` serves a torch project page (a file: URL is a folder laid out as a simple index)."""
    if index.startswith("file:"):
        return (Path(urlparse(index).path) / "torch").is_dir()
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout) as page:
            return page.status == 200
    except (OSError, ValueError):  # no route, refused, DNS, timeout, HTTP errors (URLError is an OSError)
        return False


def choose(version: str, env: Mapping[str, str], probe: Callable[[str], bool] = reachable) -> Choice:
    wheel = _local_cpu_wheel(env.get("PIP_FIND_LINKS", ""), version)
    if wheel is not None:
        return Choice([], f"CPU torch from {wheel} (PIP_FIND_LINKS)")
    index = env.get(ENV_INDEX, CPU_INDEX).strip()
    if index and probe(index):
        return Choice(["--extra-index-url", index], f"CPU torch from {index}")
    tried = f"{index} does not answer" if index else f"{ENV_INDEX} is empty"
    return Choice(
        [],
        f"no CPU torch {version} at hand (none in PIP_FIND_LINKS, {tried}): torch from pip's own indexes, "
        "whichever build they serve (a CUDA build works, only larger)",
    )


def build() -> str:
    """The build of the torch this python imports: `cpu`, or `cuda` and its CUDA version."""
    import torch  # only in the venv this runs in

    return "cpu" if torch.version.cuda is None else f"cuda {torch.version.cuda}"


def requirements(dist: str, leave_out: set[str]) -> list[str]:
    """What an installed distribution requires on this machine (markers evaluated, no extras), less some names: its
    dependencies, installed beside a torch it pins to another build than the one at hand."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement  # the venv installs it first
    from packaging.utils import canonicalize_name

    gone = {canonicalize_name(n) for n in leave_out}
    kept = []
    for line in requires(dist) or []:
        req = Requirement(line)
        if canonicalize_name(req.name) in gone:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        kept.append(str(req))
    return kept


def main(argv: list[str]) -> int:
    if argv[:1] == ["torch-args"] and len(argv) == 2:
        choice = choose(argv[1], os.environ)
        print(f"torch: {choice.why}", file=sys.stderr)
        for arg in choice.args:
            print(arg)
        return 0
    if argv == ["build"]:
        print(build())
        return 0
    if argv[:1] == ["requirements"] and len(argv) >= 2:
        for req in requirements(argv[1], set(argv[2:])):
            print(req)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
