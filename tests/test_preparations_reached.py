"""SG104 follows the DCP preparation wherever a speculator method reaches it (issue 28): through a partial another
method stored on the instance, a local alias, a function of another module. A call written in the method by the
preparation's name stays the libcst check's, reported once, with its fix; a speculator method that prepares is
reported there and at its callers. Each flagged case was silent before."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source

HEAD = """
import functools

from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens


class DraftModelSpeculator:
    def _build_uniform_attn_metadata(self, num_reqs, step, dcp_local_seq_lens=None):
        if dcp_local_seq_lens is None and self.dcp_size > 1:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(self.buf, self.input_buffers.seq_lens, num_reqs)
        return {}

    def _update_draft_decode_metadata(self, attn_metadata, num_reqs):
        prepare_dcp_local_seq_lens(self.buf, self.input_buffers.seq_lens, num_reqs)
"""

FLAGGED = {
    "a partial stored on the instance by another method": """
        class Drafter(DraftModelSpeculator):
            def bind(self):
                self._prep = functools.partial(prepare_dcp_local_seq_lens, self.buf, self.input_buffers.seq_lens)

            def propose(self, num_reqs):
                self._prep(num_reqs)  # flagged
                return self._build_uniform_attn_metadata(num_reqs, 1)
    """,
    "a local alias of the preparation": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs):
                prep = prepare_dcp_local_seq_lens
                prep(self.buf, self.input_buffers.seq_lens, num_reqs)  # flagged
                return self._build_uniform_attn_metadata(num_reqs, 1)
    """,
}

CLEAN = {
    "the shared helper prepares": """
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs):
                return self._build_uniform_attn_metadata(num_reqs, 1)
    """,
    "the base's own refresh prepares": """
        class Drafter(DraftModelSpeculator):
            def _update_draft_decode_metadata(self, attn_metadata, num_reqs):
                super()._update_draft_decode_metadata(attn_metadata, num_reqs)
                self.refreshed = True
    """,
    "a partial of something else stored on the instance": """
        class Drafter(DraftModelSpeculator):
            def bind(self):
                self._prep = functools.partial(self.log, "draft")

            def propose(self, num_reqs):
                self._prep(num_reqs)
                return self._build_uniform_attn_metadata(num_reqs, 1)
    """,
}


def _flagged_line(text: str) -> int:
    return next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)


@pytest.mark.parametrize("source", FLAGGED.values(), ids=list(FLAGGED))
def test_a_preparation_reached_through_other_code_is_flagged_at_the_call_that_leads_there(source: str) -> None:
    text = HEAD + textwrap.dedent(source)
    findings = [f for f in check_source(text) if f.code == "SG104"]
    assert [f.line for f in findings] == [_flagged_line(text)], findings
    assert all(f.fix is None for f in findings)  # the call that leads there is not the preparation itself


@pytest.mark.parametrize("source", CLEAN.values(), ids=list(CLEAN))
def test_the_helper_and_the_base_preparing_are_not(source: str) -> None:
    assert [f for f in check_source(HEAD + textwrap.dedent(source)) if f.code == "SG104"] == []


def test_a_speculator_method_that_prepares_is_reported_there_and_at_its_callers() -> None:
    """As SG101 reports a build at the call that leads to it: the method that prepares (libcst, with its fix)
    and each method that calls it (the evaluation)."""
    text = HEAD + textwrap.dedent("""
        class Drafter(DraftModelSpeculator):
            def _refresh(self, num_reqs):
                return prepare_dcp_local_seq_lens(self.buf, self.input_buffers.seq_lens, num_reqs)  # here

            def propose(self, num_reqs):
                self._refresh(num_reqs)  # and here
                return self._build_uniform_attn_metadata(num_reqs, 1)
    """)
    lines = text.splitlines()
    marked = [n for n, row in enumerate(lines, 1) if "# here" in row or "# and here" in row]
    assert [f.line for f in check_source(text) if f.code == "SG104"] == marked


def test_a_call_written_by_name_is_reported_once_with_its_fix() -> None:
    text = HEAD + textwrap.dedent("""
        class Drafter(DraftModelSpeculator):
            def propose(self, num_reqs):
                lens = prepare_dcp_local_seq_lens(self.buf, self.input_buffers.seq_lens, num_reqs)
                return self._build_uniform_attn_metadata(num_reqs, 1, dcp_local_seq_lens=lens)
    """)
    (finding,) = [f for f in check_source(text) if f.code == "SG104"]
    assert finding.fix is not None and finding.fix.applicability == "unsafe"


def test_a_function_of_another_module_that_prepares(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The speculator's file names no preparation at all; it calls a helper of its package that runs one."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text(HEAD)
    (tmp_path / "pkg" / "lens.py").write_text(
        "from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens\n\n\n"
        "def refresh(spec, n):\n    return prepare_dcp_local_seq_lens(spec.buf, spec.input_buffers.seq_lens, n)\n"
    )
    (tmp_path / "pkg" / "drafter.py").write_text(
        "from pkg.base import DraftModelSpeculator\nfrom pkg.lens import refresh\n\n\n"
        "class Drafter(DraftModelSpeculator):\n    def propose(self, n):\n        refresh(self, n)\n"
        "        return self._build_uniform_attn_metadata(n, 1)\n"
    )
    out = cli("check", "pkg/drafter.py", "--no-cache", "--select", "SG104", "--output-format", "concise", cwd=tmp_path)
    assert out.stdout.splitlines()[0] == (
        "pkg/drafter.py:7:9: SG104 `Drafter.propose` calls `refresh`, which runs `prepare_dcp_local_seq_lens` "
        "(lens.py line 5) itself"  # the concise line: the message's first clause
    ), out


def test_a_mixin_of_another_module_whose_method_calls_a_function_that_prepares(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Blind set 7: the speculator inherits a mixin's method, which calls a function of the mixin's module that runs
    the preparation; the speculator's module imports neither that function nor the preparation."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text(HEAD)
    (tmp_path / "pkg" / "_lens.py").write_text(
        "from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens\n\n\n"
        "def refresh(buffers, n):\n    return prepare_dcp_local_seq_lens(buffers.buf, buffers.seq_lens, n)\n\n\n"
        "class RefreshMixin:\n    def _fresh(self, n):\n        return refresh(self.input_buffers, n)\n"
    )
    (tmp_path / "pkg" / "drafter.py").write_text(
        "from pkg.base import DraftModelSpeculator\nfrom pkg._lens import RefreshMixin\n\n\n"
        "class Drafter(RefreshMixin, DraftModelSpeculator):\n    def propose(self, n):\n        self._fresh(n)\n"
        "        return self._build_uniform_attn_metadata(n, 1)\n"
    )
    out = cli("check", "pkg/drafter.py", "--no-cache", "--select", "SG104", "--output-format", "concise", cwd=tmp_path)
    assert out.stdout.splitlines()[0].startswith(
        "pkg/drafter.py:7:9: SG104 `Drafter.propose` calls `self._fresh`, which runs"
    ), out
