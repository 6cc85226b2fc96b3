"""The line length the analyzed project formats its code at, so that what a fix writes fits it.

Found as ruff finds its settings for a file: the nearest folder above it holding `.ruff.toml`, `ruff.toml` or a
`pyproject.toml` with a `[tool.ruff]` table decides (in that order within a folder), and its `line-length`
(`[tool.ruff] line-length` in pyproject.toml) applies, ruff's default 88 where it sets none. A configuration that
only `extend`s another is read for its own key alone. Configuration files are data: read as regular files with a
size cap and parsed as TOML, never executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specguard._files import UnreadableFile, read_regular_text
from specguard._toml import parse_toml
from specguard.errors import UserError

DEFAULT = 88  # ruff's and black's
_FILES = (".ruff.toml", "ruff.toml", "pyproject.toml")
_LIMITS = (1, 320)  # what ruff accepts


class LineLengths:
    """Line lengths by folder, each configuration read once per run; `problems` says which could not be read
    (their files get the default, and the run says so once)."""

    def __init__(self) -> None:
        self._by_folder: dict[Path, int] = {}
        self.problems: dict[Path, str] = {}

    def of(self, path: Path | str) -> int:
        start = Path(path).resolve().parent
        walked: list[Path] = []
        found = DEFAULT
        for folder in (start, *start.parents):
            if folder in self._by_folder:
                found = self._by_folder[folder]
                break
            walked.append(folder)
            decided = self._decides(folder)
            if decided is not None:
                found = decided
                break
        for folder in walked:
            self._by_folder[folder] = found
        return found

    def _decides(self, folder: Path) -> int | None:
        for name in _FILES:
            candidate = folder / name
            if not candidate.is_file():
                continue
            table = self._table(candidate)
            if table is None:
                continue  # a pyproject.toml without [tool.ruff]: ruff looks further up
            value = table.get("line-length", DEFAULT)
            if isinstance(value, bool) or not isinstance(value, int) or not _LIMITS[0] <= value <= _LIMITS[1]:
                self.problems[candidate] = f"line-length {value!r} is not an integer from 1 to 320"
                return DEFAULT
            return value
        return None

    def _table(self, path: Path) -> dict[str, Any] | None:
        try:
            data = parse_toml(read_regular_text(path), origin=str(path), what="ruff configuration")
        except (UnreadableFile, UserError) as exc:
            self.problems[path] = str(exc).removeprefix(f"{path}: ")
            return {}
        if path.name != "pyproject.toml":
            return data
        table = data.get("tool", {}).get("ruff") if isinstance(data.get("tool"), dict) else None
        return table if isinstance(table, dict) else None

    def notes(self) -> list[str]:
        """One line per configuration that could not be read, for the run's notes."""
        return [
            f"{path}: {why}; fixes of the files it governs are laid out at {DEFAULT} columns"
            for path, why in sorted(self.problems.items())
        ]
