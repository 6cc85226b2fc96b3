"""Sparse parsing keeps every kept line where it was, and drops nothing a rule can report."""

from __future__ import annotations

import ast

import pytest

from specguard.analysis import evaluate
from specguard.analysis.summary import summarize
from specguard.composition import check_paths
from specguard.program.sparse import sparse_source

SOURCE = (
    "import os\r\n"
    "X = 1  # \x0c a form feed is not a line break for CPython\n"
    "@decorator\n"
    "class Keep:\n"
    "    def m(self):\n"
    "        return build_attn_metadata(\n"
    "            num_tokens=1)\n"
    "def drop():\n"
    "    return 2\n"
    "class AlsoDrop:\n"
    "    pass\n"
)


def test_kept_definitions_stay_on_their_lines_and_the_rest_is_blank() -> None:
    summary = summarize(ast.parse(SOURCE), "m", False)
    out = sparse_source(SOURCE, summary.definitions, ("build_attn_metadata",))
    assert out.count("\n") == SOURCE.count("\n") and out.count("\r\n") == 1
    kept = out.split("\n")
    assert kept[2:7] == SOURCE.split("\n")[2:7]  # decorator through the end of the call
    assert [line.strip() for i, line in enumerate(kept) if not 2 <= i < 7] == [""] * (len(kept) - 5)
    ast.parse(out)  # still valid Python


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_sparse_and_full_parsing_report_the_same(version, vllm_source, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = vllm_source(version)
    sparse = check_paths([root], use_cache=False).findings
    monkeypatch.setattr(evaluate, "sparse_source", lambda text, definitions, names, judged=frozenset(): text)
    assert check_paths([root], use_cache=False).findings == sparse


def test_a_definition_that_names_the_sink_only_through_an_alias_is_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.py").write_text(
        "from vllm.v1.worker.gpu.attn_utils import build_attn_metadata as bam\n"
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n"
        "class S(DraftModelSpeculator):\n"
        "    def propose(self):\n"
        "        return bam()\n"
    )
    assert [f.line for f in check_paths([tmp_path], use_cache=False).findings] == [5]


def test_libcst_parses_only_a_file_whose_summary_shows_what_a_libcst_rule_matches(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """SG102 needs a speculator subclass that defines a shared helper, SG104 a name of the DCP preparation: a
    speculator module with neither is judged on the evaluator and never parsed with libcst."""
    import libcst

    from specguard.analysis import engine

    header = "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n"
    (tmp_path / "plain.py").write_text(
        header
        + "class Plain(DraftModelSpeculator):\n    def propose(self, n):\n        return self._build_attn_metadata(n)\n"
    )
    (tmp_path / "override.py").write_text(
        header + "class Override(DraftModelSpeculator):\n    def _build_attn_metadata(self, n):\n        return n\n"
    )
    parsed: list[str] = []
    real = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda text, *a, **k: parsed.append(text) or real(text, *a, **k))
    monkeypatch.setattr(engine, "cores", lambda: 1)  # every job in this process, where the patch holds
    findings = check_paths([tmp_path], use_cache=False).findings
    assert [(f.path.rpartition("/")[2], f.code) for f in findings] == [("override.py", "SG102")]
    assert len(parsed) == 1 and "class Override" in parsed[0]
