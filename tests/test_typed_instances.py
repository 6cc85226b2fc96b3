"""An unknown value an annotation promises is an instance of a class the tree defines (issue 28): its methods are
known by name and by the class that defines them, so a speculator that builds metadata through another object's
builder method (`group.build_metadata(...)`, `group.get_metadata_builder().build(...)`) bypasses the shared helpers
as a call of the sink does (SG101). The types come from where vLLM writes them: a function's return annotation
(`init_attn_backend(...) -> tuple[list[list[AttentionGroup]], ...]`), a field's, an annotated local. Each flagged
case was silent before; each clean case is the same shape done right."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source

HEAD = """
from abc import ABC


class AttentionMetadataBuilder(ABC):
    def build(self, common_prefix_len, common_attn_metadata):
        raise NotImplementedError

    def build_for_cudagraph_capture(self, common_attn_metadata):
        raise NotImplementedError


class AttentionGroup:
    layer_names: list[str]
    metadata_builders: list[AttentionMetadataBuilder]

    def get_metadata_builder(self, ubatch_id: int = 0) -> AttentionMetadataBuilder:
        return self.metadata_builders[ubatch_id]

    def build_metadata(self, common_attn_metadata, ubatch_idx: int = 0):
        return self.get_metadata_builder(ubatch_idx).build(0, common_attn_metadata)

    def build_metadata_for_cudagraph_capture(self, common_attn_metadata):
        return self.get_metadata_builder().build_for_cudagraph_capture(common_attn_metadata)


def init_attn_backend(kv_cache_config) -> tuple[list[list[AttentionGroup]], int]:
    attn_groups: list[list[AttentionGroup]] = []
    for group_spec in kv_cache_config.kv_cache_groups:
        attn_groups.append(make_groups(group_spec))
    return attn_groups, 0


def build_attn_metadata(attn_groups, num_reqs, num_tokens):
    return {}


class DraftModelSpeculator:
    def set_attn(self, kv_cache_config):
        self.attn_groups, self.cg_support = init_attn_backend(kv_cache_config)

    def _build_attn_metadata(self, num_reqs, num_tokens):
        return build_attn_metadata(self.attn_groups, num_reqs, num_tokens)
"""

FLAGGED = {
    "a builder taken from each group and called": """
        class Drafter(DraftModelSpeculator):
            def metadata(self, common):
                out = {}
                for groups in self.attn_groups:
                    for group in groups:
                        builder = group.get_metadata_builder()
                        md = builder.build(0, common)  # flagged
                        out.update(dict.fromkeys(group.layer_names, md))
                return out
    """,
    "a group's own build method, in a comprehension": """
        class Drafter(DraftModelSpeculator):
            def metadata(self, common):
                return {
                    name: group.build_metadata(common)  # flagged
                    for groups in self.attn_groups
                    for group in groups
                    for name in group.layer_names
                }
    """,
    "through a closure": """
        class Drafter(DraftModelSpeculator):
            def metadata(self, common):
                def one(group):
                    return group.get_metadata_builder(0).build(0, common)  # flagged

                return [one(group) for groups in self.attn_groups for group in groups]
    """,
    "groups keyed by id in a dict comprehension, built by another method": """
        class Drafter(DraftModelSpeculator):
            def set_attn(self, kv_cache_config):
                super().set_attn(kv_cache_config)
                self._by_id = {group.kv_cache_group_id: group for groups in self.attn_groups for group in groups}

            def metadata(self, common):
                out = {}
                for gid, group in self._by_id.items():
                    out[gid] = group.build_metadata(common)  # flagged
                return out
    """,
    "one group looked up by an unknown key": """
        class Drafter(DraftModelSpeculator):
            def metadata(self, common, gid):
                by_id = {g.kv_cache_group_id: g for gs in self.attn_groups for g in gs}
                return by_id.get(gid).build_metadata(common)  # flagged
    """,
    "groups handed as an annotated parameter": """
        class Drafter(DraftModelSpeculator):
            def _each(self, groups: "list[AttentionGroup] | None", common):
                return [g.build_metadata(common) for g in groups]  # flagged
    """,
    "groups from a method that promises them": """
        class Drafter(DraftModelSpeculator):
            def target_groups(self) -> list[AttentionGroup]:
                return self.cache.groups

            def metadata(self, common):
                return [g.build_metadata(common) for g in self.target_groups()]  # flagged
    """,
}

CLEAN = {
    "capture-time builds": """
        class Drafter(DraftModelSpeculator):
            def capture(self, common):
                return [group.build_metadata_for_cudagraph_capture(common) for gs in self.attn_groups for group in gs]
    """,
    "a builder read, not called to build": """
        class Drafter(DraftModelSpeculator):
            def set_attn(self, kv_cache_config):
                super().set_attn(kv_cache_config)
                for groups in self.attn_groups:
                    for group in groups:
                        builder = group.get_metadata_builder()
                        builder.aot_schedule = False
    """,
    "the shared helper": """
        class Drafter(DraftModelSpeculator):
            def metadata(self, num_reqs, num_tokens):
                return self._build_attn_metadata(num_reqs, num_tokens)
    """,
    "a method of the same name on an object of another class": """
        class Plan:
            def build(self, n):
                return n

        class Drafter(DraftModelSpeculator):
            def metadata(self, n):
                return Plan().build(n)
    """,
}


@pytest.mark.parametrize("source", FLAGGED.values(), ids=list(FLAGGED))
def test_a_build_through_another_objects_builder_method_is_flagged(source: str) -> None:
    text = HEAD + textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)
    assert [(f.code, f.line) for f in check_source(text)] == [("SG101", line)]


@pytest.mark.parametrize("source", CLEAN.values(), ids=list(CLEAN))
def test_the_same_objects_used_right_are_clean(source: str) -> None:
    assert check_source(HEAD + textwrap.dedent(source)) == []


def test_a_build_made_by_a_helper_module_is_flagged_at_the_call(cli, tmp_path: Path) -> None:
    """A speculator that calls a function of another module of the tree, which calls the sink: the finding is on
    the speculator's call, and names the build the helper makes."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text(HEAD)
    (tmp_path / "pkg" / "helpers.py").write_text(
        "from pkg.base import build_attn_metadata\n\n\n"
        "def direct(spec, n):\n    return build_attn_metadata(spec.attn_groups, n, n)\n"
    )
    (tmp_path / "pkg" / "drafter.py").write_text(
        "from pkg.base import DraftModelSpeculator\nfrom pkg.helpers import direct\n\n\n"
        "class Drafter(DraftModelSpeculator):\n    def metadata(self, n):\n        return direct(self, n)\n"
    )
    out = cli("check", "pkg", "--no-cache", "--select", "SG101", "--output-format", "concise", cwd=tmp_path)
    assert out.stdout.splitlines()[0] == (
        "pkg/drafter.py:7:16: SG101 `Drafter.metadata` calls `direct`, which builds with `build_attn_metadata` "
        "(helpers.py line 5)"  # the concise line: the message's first clause
    )


def test_a_build_made_by_a_method_inherited_from_another_module_is_flagged_at_the_call(cli, tmp_path: Path) -> None:
    """The fork's intermediate class (another module) builds metadata in a method of its own; a leaf speculator
    that calls it names no build at all (set 3's `EagerFallbackEagleLeaf`)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text(HEAD)
    (tmp_path / "pkg" / "middle.py").write_text(
        "from pkg.base import DraftModelSpeculator\n\n\n"
        "class MiddleSpeculator(DraftModelSpeculator):\n"
        "    def _eager(self, common):\n"
        "        return [g.build_metadata(common) for gs in self.attn_groups for g in gs]\n"
    )
    (tmp_path / "pkg" / "leaf.py").write_text(
        "from pkg.middle import MiddleSpeculator\n\n\n"
        "class Leaf(MiddleSpeculator):\n    def propose(self, common):\n        return self._eager(common)\n"
    )
    out = cli("check", "pkg/leaf.py", "--no-cache", "--select", "SG101", "--output-format", "concise", cwd=tmp_path)
    assert out.stdout.splitlines()[0].startswith(
        "pkg/leaf.py:6:16: SG101 `Leaf.propose` calls `self._eager`, which builds with `AttentionGroup.build_metadata` "
        "(middle.py line 6)"
    ), out
