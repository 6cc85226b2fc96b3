"""Facts read from the real vLLM sources with libcst (the sources are never imported)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specguard.deploy.facts import SourceFacts
from specguard.deploy.source import SourceTree
from specguard.errors import UserError

REGISTRY = (
    "v1/worker/gpu/spec_decode/__init__.py",
    "init_speculator",
    "config/speculative.py",
    "SpeculativeConfig",
)


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_version_is_read_from_the_tree(version: str, facts: Callable[[str], SourceFacts]) -> None:
    assert facts(version).version == version
    assert facts(version).label.startswith(f"vLLM {version} at ")


def test_method_registry_differs_between_versions(facts: Callable[[str], SourceFacts]) -> None:
    old = {m: {c.name for c in cs} for m, cs in facts("0.28.0").method_speculators(*REGISTRY).items()}
    new = {m: {c.name for c in cs} for m, cs in facts("0.33.0").method_speculators(*REGISTRY).items()}
    assert old["dspark"] == new["dspark"] == {"DSparkSpeculator"}
    assert old["dflash"] == {"DFlashSpeculator", "DFlash2Speculator"}
    assert {"XPressSpeculator", "LiLiCorrSpeculator"} <= new["dflash"]
    # eagle is reached through the `use_eagle()` predicate; mtp, taken by an earlier branch, is not given to it.
    assert old["eagle3"] == {"EagleSpeculator"}
    assert "EagleSpeculator" not in old["mtp"]
    assert "draft_model" not in old and new["draft_model"] == {"StandaloneARSpeculator"}


def test_speculator_ancestry(facts: Callable[[str], SourceFacts]) -> None:
    f = facts("0.33.0")
    [lilicorr] = [c for c in f.method_speculators(*REGISTRY)["dflash"] if c.name == "LiLiCorrSpeculator"]
    assert [a.name for a in f.ancestors(lilicorr)][:3] == [
        "LiLiCorrSpeculator",
        "DFlash2Speculator",
        "DFlashSpeculator",
    ]


def test_speculative_methods_are_read_from_the_literal_alias(facts: Callable[[str], SourceFacts]) -> None:
    old = facts("0.28.0").literal_alias("config/speculative.py", "SpeculativeMethod")
    new = facts("0.33.0").literal_alias("config/speculative.py", "SpeculativeMethod")
    assert old is not None and new is not None
    assert {"dflash", "dspark", "eagle3", "mtp", "deepseek_mtp"} <= set(old) & set(new)
    assert "medusa" in old and "medusa" not in new


def test_flashinfer_mla_builder_facts(facts: Callable[[str], SourceFacts]) -> None:
    for version, declared, required in (("0.28.0", None, None), ("0.33.0", True, 1)):
        f = facts(version)
        backend = f.backend("v1/attention/backends/registry.py", "FLASHINFER_MLA")
        assert backend is not None and backend.builder is not None
        assert backend.builder.name == "FlashInferMLAMetadataBuilder"
        found = f.class_attribute(backend.builder, "supports_non_causal_multi_token_dcp")
        assert (found[0] if found else None) == declared
        requirement = f.interleave_requirement(backend.builder, "interleave_size")
        assert (requirement[0] if requirement else None) == required


def test_evidence_is_found_only_in_raise_or_warning_strings(facts: Callable[[str], SourceFacts]) -> None:
    f = facts("0.28.0")
    assert f.has_evidence("config/parallel.py", "raise", "PCP does not support data parallelism")
    assert not facts("0.33.0").has_evidence("config/parallel.py", "raise", "PCP does not support data parallelism")
    # Split over two literals in the source.
    assert f.has_evidence("config/speculative.py", "raise", "other value than 1 or target model tensor_parallel_size")
    # Present in a warning, not in a raise.
    assert f.has_evidence("config/vllm.py", "warning", "Dynamic speculative decoding is not supported with data")
    assert not f.has_evidence("config/vllm.py", "raise", "Dynamic speculative decoding is not supported with data")
    # A docstring is not a validation.
    assert not f.has_evidence("config/parallel.py", "raise", "Block_size should be divisible by")


def test_findings_come_from_the_analyzer(facts: Callable[[str], SourceFacts]) -> None:
    old = {f.code for f in facts("0.28.0").findings}
    new = {f.code for f in facts("0.33.0").findings}
    assert {"SG102", "SG103", "SG201"} <= old
    assert not {c for c in new if c.startswith("SG1")}
    assert "SG201" in new


def test_engine_options_are_real_vllm_options(facts: Callable[[str], SourceFacts]) -> None:
    assert {"data-parallel-size-local", "max-model-len", "speculative-config"} <= facts("0.33.0").engine_options


def test_the_analyzed_vllm_is_never_imported(source_dir: Callable[[str], Path]) -> None:
    before = set(sys.modules)
    f = SourceFacts.open(source_dir("0.28.0"))  # a fresh one: nothing cached
    f.method_speculators(*REGISTRY)
    f.class_attribute(
        f.backend("v1/attention/backends/registry.py", "FLASHINFER_MLA").builder,  # type: ignore[union-attr]
        "supports_non_causal_multi_token_dcp",
    )
    f.literal_alias("config/speculative.py", "SpeculativeMethod")
    assert not [m for m in set(sys.modules) - before if m == "vllm" or m.startswith("vllm.")]


def test_source_tree_accepts_a_dir_holding_vllm(source_dir: Callable[[str], Path]) -> None:
    pkg = source_dir("0.33.0")
    assert SourceTree.open(pkg.parent).root == pkg.resolve()


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p / "missing", "not a directory"),
        (lambda p: p, "not a vllm package directory"),
    ],
)
def test_bad_source_dir(tmp_path: Path, make: Callable[[Path], Path], expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        SourceTree.open(make(tmp_path))


def test_installed_vllm_is_located_without_running_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specguard.deploy.facts import installed_vllm_dir

    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('specguard must not import the served vLLM')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert installed_vllm_dir() == pkg
    assert "vllm" not in sys.modules
