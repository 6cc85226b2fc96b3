"""The `specguard` command's entry point: `--version` answered before anything else is imported (an editor or a
pre-commit hook asks it on every start), then the command line (cli.py)."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def run() -> NoReturn:
    if sys.argv[1:] in (["--version"], ["-V"]):
        from specguard import __version__

        sys.stdout.write(f"specguard {__version__}\n")
        sys.stdout.flush()
        os._exit(0)
    from specguard import cli

    cli.run()
