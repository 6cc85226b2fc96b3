"""The evaluator knows no vLLM names: a fork that renames the descriptor, its producer, its attributes, the mode
enum and its FULL mode, the helper, the spec classes, their merge and its flag adapts SG103 and SG201 with a pack,
without code (its own reduction helper is evaluated like any other function)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specguard.composition import check_paths
from specguard.settings import Settings

FORK_PACK = """
[speculators]
replace = true
bases = ["ForkDrafter"]
shared_helpers = ["_fork_metadata"]

[metadata]
replace = true
sink = ["fork_build_metadata"]
token_count_params = ["tokens"]

[padding]
replace = true
descriptor_producers = ["fork_dispatch"]
descriptor_types = ["ForkBatch"]
descriptor_params = ["fork_batch"]
padded_attribute = "padded_len"
mode_attribute = "graph_mode"
mode_enum = "fork.base.GraphMode"
runtime_modes = ["EAGER", "PIECES", "WHOLE"]
full_mode = "WHOLE"

[kv_groups]
replace = true
merge_methods = ["combine"]
spec_class_suffixes = ["Layout"]
flags = ["bidirectional"]
"""

FORK_BASE = """
import enum


class GraphMode(enum.Enum):
    EAGER = 0
    PIECES = 1
    WHOLE = 2


def any_of(values):
    return any(values)


class ForkDrafter:
    def _fork_metadata(self, n, tokens):
        return fork_build_metadata(n, tokens)
"""

FORK = """
from fork.base import ForkDrafter, GraphMode, any_of, fork_dispatch


class MyDrafter(ForkDrafter):
    def _padded(self, fork_batch):
        return fork_batch.padded_len

    def bad(self, n):
        batch = fork_dispatch(n)
        size = self._padded(batch)
        return self._fork_metadata(n, tokens=size)  # SG103

    def good(self, n):
        batch = fork_dispatch(n)
        if batch.graph_mode is not GraphMode.WHOLE:
            return None
        return self._fork_metadata(n, tokens=batch.padded_len)


class CacheLayout:
    bidirectional: bool = False

    @classmethod
    def combine(cls, layouts):
        merged = any_of(x.bidirectional for x in layouts)
        return cls(bidirectional=merged)  # SG201
"""


def test_a_fork_pack_renames_every_name_the_dataflow_uses(tmp_path: Path) -> None:
    (tmp_path / "fork").mkdir()
    (tmp_path / "fork" / "__init__.py").write_text("")
    (tmp_path / "fork" / "base.py").write_text(FORK_BASE)
    (tmp_path / "fork" / "drafter.py").write_text(textwrap.dedent(FORK))
    (tmp_path / "fork.toml").write_text(FORK_PACK)
    settings = Settings(rule_packs=[tmp_path / "fork.toml"], select=["SG103", "SG201"])
    result = check_paths([tmp_path / "fork"], settings, use_cache=False)
    assert result.errors == []
    lines = FORK.splitlines()
    expected = [(c, n) for n, line in enumerate(lines, 1) for c in ("SG103", "SG201") if f"# {c}" in line]
    got = [(f.code, f.line) for f in result.findings]
    assert got == expected, result.findings
    assert "returned by `MyDrafter._padded`" in result.findings[0].message
