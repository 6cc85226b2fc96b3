"""The terminal colours of the concise, grouped and full formats, as ruff's palette: the code bold red, the path
bold, `[*]` cyan, the frame's gutter blue. `Style(False)` returns every text as it is."""

from __future__ import annotations

from dataclasses import dataclass

_RESET = "\x1b[0m"
BOLD = "1"
UNDERLINE = "4"
RED = "31"
CYAN = "36"
BRIGHT_RED = "91"
BRIGHT_BLUE = "94"
BRIGHT_CYAN = "96"


@dataclass(frozen=True)
class Style:
    enabled: bool

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not text:
            return text
        return "".join(f"\x1b[{code}m" for code in codes) + text + _RESET

    def fix_mark(self, fixable: bool) -> str:
        """ruff's `[*] ` before the message of a finding `--fix` would fix (the star cyan)."""
        return f"[{self('*', CYAN)}] " if fixable else ""

    def code(self, code: str) -> str:
        return self(code, BOLD, RED)

    def separator(self) -> str:
        return self(":", CYAN)
