"""The source lines a report shows (the full format's frame, the fingerprints), read again from the file a finding
names: a regular file only, within the project's size cap for sources (specguard/_files.py), never what is not one
(a FIFO, a device). A file that cannot be read or decoded has no lines, and the report goes on without them."""

from __future__ import annotations

from specguard._files import SOURCE_CAP, read_regular_text
from specguard.lines import comment_lines, source_lines


class Sources:
    """Each file read at most once per report."""

    def __init__(self, given: dict[str, str] | None = None) -> None:
        # a source given in memory (standard input, under its --stdin-filename) is that text, not the disk's
        self._read: dict[str, list[str] | None] = {
            path: [line.rstrip("\r\n") for line in source_lines(text)] for path, text in (given or {}).items()
        }
        self._moved: dict[str, dict[int, int]] = {}

    def lines(self, path: str) -> list[str] | None:
        """The file's lines without their endings (numbered as `ast` numbers them), or None when unreadable."""
        if path not in self._read:
            try:
                text = read_regular_text(path, SOURCE_CAP)
            except (OSError, ValueError):  # UnreadableFile is an OSError; a name with a NUL a ValueError
                self._read[path] = None
            else:
                self._read[path] = [line.rstrip("\r\n") for line in source_lines(text)]
        return self._read[path]

    def comment_line(self, path: str, number: int) -> int:
        """The line a suppression comment for line `number` goes on (ruff's `noqa_row`); `number` where unknown."""
        if path not in self._moved:  # once per file: a file may hold thousands of findings
            lines = self.lines(path)
            self._moved[path] = {} if lines is None else comment_lines("\n".join(lines))
        return self._moved[path].get(number, number)

    def line(self, path: str, number: int) -> str | None:
        lines = self.lines(path)
        return lines[number - 1] if lines is not None and 1 <= number <= len(lines) else None
