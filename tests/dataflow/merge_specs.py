"""Shared by the SG201 tests: a spec module checked on its own, as `specguard check` sees one file."""

from __future__ import annotations

import textwrap

from specguard.composition import check_source
from specguard.findings import Finding

HEADER = """\
import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class MLAAttentionSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False

"""


def check_merge(body: str) -> tuple[list[Finding], str]:
    """The findings for `HEADER + body` (body: the `merge` classmethod, indented under MLAAttentionSpec)."""
    text = HEADER + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n"
    return check_source(text, "kv_cache_interface.py", "kv_cache_interface"), text


def line_of(text: str, marker: str) -> int:
    (number,) = [n for n, line in enumerate(text.splitlines(), 1) if marker in line]
    return number
