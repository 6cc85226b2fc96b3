"""The part of a module the rules read, at its original line numbers, for libcst to parse.

Rules look only into top-level classes and functions, and only those that name something from the packs can
produce a finding. Every other line is blanked (kept as a bare line ending), so libcst parses a fraction of the
file while every line and column it reports stays where it is in the real file. On vLLM's speculator modules,
most of whose text is Triton kernels, this is what makes libcst affordable.
"""

from __future__ import annotations

from specguard.lines import source_lines
from specguard.program.reading import names_as_python_reads


def sparse_lines(text: str) -> list[str]:
    """The lines of `text` as CPython numbers them (specguard/lines.py), each with its line ending, and an empty
    last one."""
    return [*source_lines(text), ""]


def sparse_source(
    text: str, definitions: list[tuple[int, int]], names: tuple[str, ...], lines_judged: frozenset[int] = frozenset()
) -> str:
    """`text` with the definitions that name one of `names`, or hold a line an evaluation judged (a function that
    reaches what the packs name through other code), kept, and every other line blanked."""
    lines = sparse_lines(text)
    keep = [False] * len(lines)
    for first, last in definitions:
        held = names_as_python_reads("".join(lines[first - 1 : last]))  # names as Python compares them
        if any(name in held for name in names) or any(first <= line <= last for line in lines_judged):
            keep[first - 1 : last] = [True] * (last - first + 1)
    out: list[str] = []
    for line, kept in zip(lines, keep, strict=True):
        if not kept:
            line = line[len(line.rstrip("\r\n")) :]
            if line.startswith("\n") and out and out[-1].endswith("\r"):
                line = "\r\n"  # a bare LF after a lone CR would join the two lines into one CRLF
        out.append(line)
    return "".join(out)
