"""The line length the analyzed project formats its code at, so that what a fix writes fits it.

Found as ruff finds its settings for a file: the nearest folder above it holding `.ruff.toml`, `ruff.toml` or a
`pyproject.toml` with a `[tool.ruff]` table decides (in that order within a folder), and its `line-length`
(`[tool.ruff] line-length` in pyproject.toml) applies, ruff's default 88 where it sets none. A configuration that
only `extend`s another is read for its own key alone. Configuration files are data: read as regular files with a
size cap and parsed as TOML, never executed.

Unlike ruff, the search never goes above the checkout's root (the first folder up holding `.git`,
`specguard.project`): a folder that holds the checkout (a world-writable /tmp) is not the project's, and whoever
can write there must not choose how fixes are laid out. A configuration someone else may have written
(`specguard.ownership`) is not read either, wherever it is: one note names it, and the search goes on above it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specguard._toml import read_toml_file
from specguard.errors import UserError
from specguard.ownership import untrusted_found
from specguard.project import REPOSITORY_MARKERS, project_top

DEFAULT = 88  # ruff's and black's
_FILES = (".ruff.toml", "ruff.toml", "pyproject.toml")
_LIMITS = (1, 320)  # what ruff accepts


class LineLengths:
    """Line lengths by folder, each configuration read once per run; `problems` says which could not be read
    (their files get the default, and the run says so once)."""

    def __init__(self) -> None:
        self._by_folder: dict[Path, int] = {}
        self.problems: dict[Path, str] = {}
        self.refused: dict[Path, str] = {}  # configurations someone else may have written: not read

    def of(self, path: Path | str) -> int:
        start = Path(path).resolve().parent
        top = project_top(str(start), REPOSITORY_MARKERS)
        folders = [start, *start.parents]
        if top is not None:
            folders = folders[: folders.index(Path(top)) + 1]
        walked: list[Path] = []
        found = DEFAULT
        for folder in folders:
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
        """The file's ruff table; None when it holds none, or when someone else may have written it (as if absent:
        said once, for a file that would have decided)."""
        try:
            data, st = read_toml_file(path, what="ruff configuration")
        except UserError as exc:
            self.problems[path] = str(exc).removeprefix(f"{path}: ")
            return {}
        table: Any = data
        if path.name == "pyproject.toml":
            table = data.get("tool", {}).get("ruff") if isinstance(data.get("tool"), dict) else None
        if not isinstance(table, dict):
            return None
        why = untrusted_found(path, st)
        if why is not None:
            self.refused[path] = why
            return None
        return table

    def notes(self) -> list[str]:
        """One line per configuration that could not be read, for the run's notes."""
        return [
            *(
                f"{path}: {why}; fixes of the files it governs are laid out at {DEFAULT} columns"
                for path, why in sorted(self.problems.items())
            ),
            *(
                f"{path} was not read ({why}): someone else may have written it; fixes are laid out by the ruff "
                "configuration above it, if any"
                for path, why in sorted(self.refused.items())
            ),
        ]
