"""Facts read from the real vLLM sources with `ast` (the sources are never imported)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork, replace, rewrite

from specguard.composition import check_served_tree
from specguard.deploy.catalogue import load_catalogue
from specguard.deploy.doctor import _check_summary
from specguard.deploy.facts import SourceFacts, open_source
from specguard.deploy.hazards import Context, _speculators, evaluate
from specguard.deploy.load import load
from specguard.deploy.situation import find_sites
from specguard.errors import UserError
from specguard.program.tree import ClassInfo, SourceTree


@pytest.mark.parametrize("version", ["0.28.0", "0.30.0", "0.33.0"])
def test_version_is_read_from_the_tree(version: str, facts: Callable[[str], SourceFacts]) -> None:
    assert facts(version).version == version
    assert facts(version).label.startswith(f"vLLM {version} at ")


def _built(f: SourceFacts, method: str, runner: int = 0) -> dict[str, ClassInfo]:
    """The speculator classes a model runner's registry builds for `method`, by evaluating it: the served
    `init_speculator` (V2, runner 0) or what `GPUModelRunner.__init__` stores in `self.drafter` (V1, runner 1)."""
    cfg = load(None, ["m", "-sc", json.dumps({"method": method, "model": "d", "num_speculative_tokens": 2})], f).config
    registry = load_catalogue()["CFG101"].params.registries[runner]  # type: ignore[attr-defined]
    return {c.name: c for c in _speculators(Context(cfg, f), registry)}


def test_method_registry_differs_between_versions(facts: Callable[[str], SourceFacts]) -> None:
    old, new = facts("0.28.0"), facts("0.33.0")
    assert set(_built(old, "dspark")) == set(_built(new, "dspark")) == {"DSparkSpeculator"}
    assert set(_built(old, "dflash")) == {"DFlashSpeculator", "DFlash2Speculator"}
    assert {"XPressSpeculator", "LiLiCorrSpeculator"} <= set(_built(new, "dflash"))
    # eagle is reached through the `use_eagle()` predicate; mtp, taken by an earlier branch, is not given to it.
    assert set(_built(old, "eagle3")) == {"EagleSpeculator"}
    assert "EagleSpeculator" not in _built(old, "mtp")
    assert _built(old, "draft_model") == {} and set(_built(new, "draft_model")) == {"StandaloneARSpeculator"}


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_the_v1_model_runner_registry(version: str, facts: Callable[[str], SourceFacts]) -> None:
    f = facts(version)
    assert set(_built(f, "dflash", runner=1)) == {"DFlashProposer"}
    assert set(_built(f, "eagle3", runner=1)) == {"EagleProposer"}
    assert set(_built(f, "ngram", runner=1)) == {"NgramProposer"}


def test_speculator_ancestry(facts: Callable[[str], SourceFacts]) -> None:
    f = facts("0.33.0")
    lilicorr = _built(f, "dflash")["LiLiCorrSpeculator"]
    assert [a.name for a in f.tree.ancestors(lilicorr)][:3] == [
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
    for version, declared in (("0.28.0", None), ("0.33.0", True)):
        f = facts(version)
        backend = f.backend("v1/attention/backends/registry.py", "FLASHINFER_MLA")
        assert backend is not None and backend.builder is not None
        assert backend.builder.name == "FlashInferMLAMetadataBuilder"
        found = f.class_attribute(backend.builder, "supports_non_causal_multi_token_dcp")
        assert (found[0] if found else None) == declared


def _sites(f: SourceFacts, text: str, kind: str = "raise") -> list[str]:
    return [s.where for s in find_sites(f.tree, text, kind)]


def test_statements_are_found_by_what_they_raise_or_warn(facts: Callable[[str], SourceFacts]) -> None:
    old, new = facts("0.28.0"), facts("0.33.0")
    assert [w.split(":")[0] for w in _sites(old, "PCP does not support data parallelism")] == ["config/parallel.py"]
    assert _sites(new, "PCP does not support data parallelism") == []
    # 0.30.0 moved it into the platforms (CUDA and ROCm each refuse it in their own words).
    mid = {w.split(":")[0] for w in _sites(facts("0.30.0"), "PCP does not support data parallelism")}
    assert mid == {"platforms/cuda.py", "platforms/rocm.py"}
    # In an f-string, after a hole.
    assert _sites(old, "other value than 1 or target model tensor_parallel_size")
    # Split over two literals, in a warning and not in a raise.
    assert _sites(old, "Dynamic speculative decoding is not supported with data", "warning")
    assert not _sites(old, "Dynamic speculative decoding is not supported with data")
    # An assert's message counts; a docstring does not.
    assert _sites(old, "divisible by cp_kv_cache_interleave_size")
    assert not _sites(old, "Block_size should be divisible by")


def test_findings_come_from_the_analyzer(facts: Callable[[str], SourceFacts]) -> None:
    old = {f.code for f in facts("0.28.0").findings}
    new = {f.code for f in facts("0.33.0").findings}
    assert {"SG102", "SG103", "SG201"} <= old
    assert not {c for c in new if c.startswith("SG1")}
    assert "SG201" in new


def test_a_served_tree_is_checked_whole_whatever_the_folders_above_it_ignore(
    tmp_path: Path, source_dir: Callable[[str], Path], facts: Callable[[str], SourceFacts]
) -> None:
    # An installed vLLM sits under `site-packages` (a default exclude of `specguard check`); this one also sits in a
    # git repository whose .gitignore ignores it, and holds an .ignore of its own: Python imports it all the same.
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".gitignore").write_text("site-packages/\n*.py\n")
    tree = fork(source_dir("0.28.0"), project / "lib" / "site-packages")
    (tree / "v1" / ".ignore").write_text("*\n")
    served = SourceFacts.open(tree, check_served_tree)
    release = facts("0.28.0")
    counts = Counter(f.code for f in release.findings)
    assert Counter(f.code for f in served.findings) == counts and {"SG102", "SG103"} <= set(counts)
    spec = json.dumps({"method": "dflash", "model": "d", "num_speculative_tokens": 3})
    judgement = evaluate(load(None, ["m", "-dp", "2", "-sc", spec], served).config, load_catalogue(), served)
    assert "CFG101" in {f.code for f in judgement.findings}
    doctor = _check_summary(tree, check_served_tree)
    assert doctor.files == len(list(tree.rglob("*.py"))) and doctor.findings == dict(sorted(counts.items()))


@pytest.mark.parametrize("version", ["0.28.0", "0.30.0", "0.33.0"])
def test_serve_options_are_read_from_the_parser_construction(version: str, facts: Callable[[str], SourceFacts]) -> None:
    options = facts(version).serve_options
    assert options.problems == []
    flags = options.flag_names()
    assert {"--data-parallel-size-local", "--max-model-len", "--speculative-config", "-sc", "-tp", "--port"} <= flags
    by_dest = {o.dest: o for o in options.options}
    assert by_dest["served_model_name"].nargs == "+"
    assert by_dest["enforce_eager"].action == "boolean"
    assert by_dest["compilation_config"].value.kind == "config"
    assert by_dest["compilation_config"].value.config.name == "CompilationConfig"  # type: ignore[union-attr]
    assert by_dest["max_model_len"].value.kind == "human_int"
    assert by_dest["model_tag"].nargs == "?" and by_dest["model_tag"].flags == ()
    # `--enable-x` pairs with `--disable-x` only where the served FlexibleArgumentParser registers that action.
    assert bool(options.inverse_prefixes) == (version == "0.33.0")


def test_the_analyzed_vllm_is_never_imported(source_dir: Callable[[str], Path]) -> None:
    before = set(sys.modules)
    f = SourceFacts.open(source_dir("0.28.0"))  # a fresh one: nothing cached
    _built(f, "dflash")
    f.class_attribute(
        f.backend("v1/attention/backends/registry.py", "FLASHINFER_MLA").builder,  # type: ignore[union-attr]
        "supports_non_causal_multi_token_dcp",
    )
    f.literal_alias("config/speculative.py", "SpeculativeMethod")
    assert f.serve_options.options
    find_sites(f.tree, "must be divisible by dcp_size", "raise")
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


def test_a_tree_edited_between_two_runs_in_one_process_is_read_as_edited(
    source_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """A process keeps a tree's facts for its next run (the config pre-flight run case after case), but not past an
    edit of a module: a fork edited in place between two runs in one process is judged as it now is."""
    tree = fork(source_dir("0.33.0"), tmp_path)
    first = open_source(tree, check_served_tree)
    assert first is not None and first.version == "0.33.0"
    assert open_source(tree, check_served_tree) is first
    rewrite(tree, "_version.py", replace("__version__ = version = '0.33.0'", "__version__ = version = '0.33.1'"))
    edited = open_source(tree, check_served_tree)
    assert edited is not None and edited.version == "0.33.1"
