"""Baselines: record today's findings, report only new ones later, robust to lines moving.

A finding is matched by (file, code, scope, the text of its line with whitespace squeezed), not by line number,
and as a multiset, so two identical findings in one function need two baseline entries.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from specguard._files import (
    OutsideTree,
    UnreadableFile,
    locate_beneath,
    open_folder,
    read_regular_text,
    relative_inside,
    replace_atomically,
)
from specguard.errors import UserError
from specguard.findings import Finding
from specguard.settings import Settings

_VERSION = 1
Lines = Callable[[str, int], str]  # a line of a file as the run checked it (CheckResult.line)


def _fingerprint(f: Finding, settings: Settings, line: Lines) -> str:
    """The file is keyed relative to the configuration root, so the baseline holds however the paths were typed
    and wherever in the project specguard runs."""
    text = " ".join(line(f.path, f.line).split())
    return json.dumps([settings.relative(f.path), f.code, f.symbol or "", text])


def write_baseline(path: Path, findings: list[Finding], settings: Settings, line: Lines) -> None:
    """Written atomically (a failure part-way keeps the previous baseline whole); a symlink's target is written.

    A path inside the project is walked beneath a handle held on the project's root (`_files.locate_beneath`), so
    a link on it is followed only while it stays inside the project, and a folder swapped for a link meanwhile
    cannot send the write elsewhere; a path outside the project (the user's choice) is written as named."""
    entries = sorted(_fingerprint(f, settings, line) for f in findings)
    data = {"version": _VERSION, "findings": [json.loads(e) for e in entries]}
    relative = relative_inside(path, settings.root)
    # inside the project: beneath its root; elsewhere (the user's choice): the real path, as named
    base, name = (settings.root, relative) if relative is not None else os.path.split(os.path.realpath(path))
    try:
        base_fd = open_folder(base)
        try:
            folder, name, _ = locate_beneath(base_fd, name)
        finally:
            os.close(base_fd)
        try:
            replace_atomically(name, (json.dumps(data, indent=1) + "\n").encode(), dir_fd=folder)
        finally:
            os.close(folder)
    except OutsideTree as exc:
        raise UserError(f"{path}: cannot write baseline: {exc.how} leads outside the project") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot write baseline: {exc.strerror or exc}") from None


def read_baseline(path: Path) -> Counter[str]:
    try:
        data = json.loads(read_regular_text(path))
        if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("findings"), list):
            raise ValueError("not a specguard baseline (expected {'version': 1, 'findings': [...]})")
        return Counter(json.dumps(entry) for entry in data["findings"])
    except UnreadableFile as exc:
        if not os.path.lexists(path):
            raise UserError(f"{path}: baseline not found; create it with --write-baseline {path}") from None
        raise UserError(f"{path}: unreadable baseline: {exc.reason}") from None
    except RecursionError:
        raise UserError(f"{path}: unreadable baseline: nested too deeply to be a specguard baseline") from None
    except ValueError as exc:
        raise UserError(f"{path}: unreadable baseline: {exc}") from None


def filter_baseline(findings: list[Finding], known: Counter[str], settings: Settings, line: Lines) -> list[Finding]:
    remaining = Counter(known)
    fresh = []
    for f in findings:
        key = _fingerprint(f, settings, line)
        if remaining[key] > 0:
            remaining[key] -= 1
        else:
            fresh.append(f)
    return fresh
