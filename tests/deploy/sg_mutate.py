"""Mutated copies of a real vLLM release for the config pre-flight tests: a fork as a user would have it.

The copy hard-links every file of the cached release (a copy where the file system cannot link), and a mutated
file is written anew in the copy, so the cached release is never touched.
"""

from __future__ import annotations

import ast
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def fork(release: Path, into: Path) -> Path:
    """A copy of the `vllm/` dir `release` under `into`; returns the copy's `vllm/` dir."""
    target = into / "vllm"
    shutil.copytree(release, target, copy_function=_link_or_copy)
    return target


def rewrite(tree: Path, relpath: str, change: Callable[[str], str]) -> None:
    """Replace one file of the copy with `change(text)`; the change must change something."""
    path = tree / relpath
    text = path.read_text(encoding="utf-8")
    new = change(text)
    assert new != text, f"the mutation of {relpath} changed nothing"
    path.unlink()  # a hard link: never write through it into the cached release
    path.write_text(new, encoding="utf-8")


def replace(old: str, new: str, count: int = 1) -> Callable[[str], str]:
    """A change that replaces `old` (which must occur `count` times) by `new`."""

    def change(text: str) -> str:
        assert text.count(old) == count, f"expected {count} of {old!r}, found {text.count(old)}"
        return text.replace(old, new)

    return change


def _statement(text: str, first_line: str) -> tuple[list[str], ast.stmt]:
    """The file's lines and the one statement whose first line is `first_line` (stripped)."""
    lines = text.splitlines(keepends=True)
    found = [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.stmt) and lines[node.lineno - 1].strip() == first_line
    ]
    assert len(found) == 1, f"expected one statement starting {first_line!r}, found {len(found)}"
    return lines, found[0]


def wrap_in_try(first_line: str, handler: str, body: list[str]) -> Callable[[str], str]:
    """A change that puts the statement starting with `first_line` inside `try:`, followed by
    `except <handler>:` running `body` (statements, one a line)."""

    def change(text: str) -> str:
        lines, stmt = _statement(text, first_line)
        first, last = stmt.lineno - 1, stmt.end_lineno or stmt.lineno
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        inner = "".join("    " + line if line.strip() else line for line in lines[first:last])
        handled = "".join(f"{indent}    {statement}\n" for statement in body)
        return "".join(
            [*lines[:first], f"{indent}try:\n", inner, f"{indent}except {handler}:\n", handled, *lines[last:]]
        )

    return change


def through_method(first_line: str, method: str) -> Callable[[str], str]:
    """A change that moves the value of the assignment starting with `first_line` (`self.x = <call>`, in a method)
    into a new method `method` of the same class, which the assignment calls instead: one more level of callers
    between the caller and what the call checks."""

    def change(text: str) -> str:
        lines, stmt = _statement(text, first_line)
        assert isinstance(stmt, ast.Assign)
        value = ast.unparse(stmt.value)
        indent = lines[stmt.lineno - 1][: len(lines[stmt.lineno - 1]) - len(lines[stmt.lineno - 1].lstrip())]
        target = ast.unparse(stmt.targets[0])
        first, last = stmt.lineno - 1, stmt.end_lineno or stmt.lineno
        text = "".join([*lines[:first], f"{indent}{target} = self.{method}()\n", *lines[last:]])
        tree = ast.parse(text)
        owner = next(
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.lineno <= stmt.lineno <= (node.end_lineno or 0)
        )
        lines = text.splitlines(keepends=True)
        end = owner.end_lineno or owner.lineno
        added = f"\n    def {method}(self):\n        return {value}\n"
        return "".join([*lines[:end], added, *lines[end:]])

    return change
