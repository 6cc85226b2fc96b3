"""Each hazard, positive and negative, judged against the real vLLM 0.28.0 and 0.33.0 sources."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specguard.deploy.catalogue import Catalogue
from specguard.deploy.facts import SourceFacts
from specguard.deploy.hazards import EVALUATORS, evaluate
from specguard.deploy.load import build

OLD, NEW = "0.28.0", "0.33.0"


def _codes(config: dict[str, Any], facts: SourceFacts | None, catalogue: Catalogue) -> set[str]:
    return {f.code for f in evaluate(build(config, "test"), catalogue, facts).findings}


def _spec(method: str, **extra: Any) -> dict[str, Any]:
    return {"method": method, "model": "some/draft", "num_speculative_tokens": 4, **extra}


# (code, config, versions it must fire on); every case is also checked on the versions it must NOT fire on.
CASES: list[tuple[str, str, dict[str, Any], set[str]]] = [
    # CFG101: DFlash-family draft + DP>1 where the source has SG102/SG103 on that draft path.
    ("CFG101", "dflash-dp2", {"data-parallel-size": 2, "speculative-config": _spec("dflash")}, {OLD}),
    ("CFG101", "dspark-dp2", {"data-parallel-size": 2, "speculative-config": _spec("dspark")}, {OLD}),
    ("CFG101", "dflash-dp1", {"data-parallel-size": 1, "speculative-config": _spec("dflash")}, set()),
    # EAGLE has SG103 findings in 0.28.0 too, but it is not on the DFlash draft path.
    ("CFG101", "eagle3-dp2", {"data-parallel-size": 2, "speculative-config": _spec("eagle3")}, set()),
    ("CFG101", "dp2-no-spec", {"data-parallel-size": 2}, set()),
    # CFG102: FlashInfer MLA native DCP requires interleave 1 in 0.33.0; 0.28.0's builder has no such check.
    (
        "CFG102",
        "fimla-dcp-interleave16",
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 2,
            "cp-kv-cache-interleave-size": 16,
            "attention-backend": "FLASHINFER_MLA",
        },
        {NEW},
    ),
    (
        "CFG102",
        "fimla-dcp-deprecated-key",
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 2,
            "dcp-kv-cache-interleave-size": 8,
            "attention-backend": "flashinfer_mla",
        },
        {NEW},
    ),
    (
        "CFG102",
        "fimla-dcp-interleave1",
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 2,
            "cp-kv-cache-interleave-size": 1,
            "attention-backend": "FLASHINFER_MLA",
        },
        set(),
    ),
    (
        "CFG102",
        "flashmla-dcp-interleave16",
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 2,
            "cp-kv-cache-interleave-size": 16,
            "attention-backend": "FLASHMLA",
        },
        set(),
    ),
    (
        "CFG102",
        "fimla-no-dcp",
        {"cp-kv-cache-interleave-size": 16, "attention-backend": "FLASHINFER_MLA"},
        set(),
    ),
    # CFG103: dspark + DCP on FlashInfer MLA without the non-causal DCP declaration.
    (
        "CFG103",
        "dspark-dcp-fimla",
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 4,
            "attention-backend": "FLASHINFER_MLA",
            "speculative-config": _spec("dspark"),
        },
        {OLD},
    ),
    (
        "CFG103",
        "dflash-dcp-fimla",
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 4,
            "attention-backend": "FLASHINFER_MLA",
            "speculative-config": _spec("dflash"),
        },
        set(),
    ),
    (
        "CFG103",
        "dspark-fimla-no-dcp",
        {"attention-backend": "FLASHINFER_MLA", "speculative-config": _spec("dspark")},
        set(),
    ),
    # CFG104: non-causal draft where the source merges KV-cache group flags with any() (both versions).
    ("CFG104", "dspark", {"speculative-config": _spec("dspark")}, {OLD, NEW}),
    ("CFG104", "dflash", {"speculative-config": _spec("dflash")}, set()),
    # CFG105: TP not divisible by DCP (both sources validate it).
    ("CFG105", "tp4-dcp3", {"tensor-parallel-size": 4, "decode-context-parallel-size": 3}, {OLD, NEW}),
    ("CFG105", "tp4-dcp2", {"tensor-parallel-size": 4, "decode-context-parallel-size": 2}, set()),
    # CFG106: a method the served source does not accept (medusa was dropped after 0.28.0).
    ("CFG106", "medusa", {"speculative-config": _spec("medusa")}, {NEW}),
    ("CFG106", "typo-method", {"speculative-config": _spec("dflsh")}, {OLD, NEW}),
    ("CFG106", "dflash", {"speculative-config": _spec("dflash")}, set()),
    # CFG107: draft TP other than 1 or the target's.
    (
        "CFG107",
        "draft-tp2-tp4",
        {"tensor-parallel-size": 4, "speculative-config": _spec("eagle3", draft_tensor_parallel_size=2)},
        {OLD, NEW},
    ),
    (
        "CFG107",
        "draft-tp1-tp4",
        {"tensor-parallel-size": 4, "speculative-config": _spec("eagle3", draft_tensor_parallel_size=1)},
        set(),
    ),
    # CFG108: tensor_parallel_size inside speculative-config.
    ("CFG108", "spec-tp", {"speculative-config": _spec("eagle3", tensor_parallel_size=2)}, {OLD, NEW}),
    ("CFG108", "spec-draft-tp", {"speculative-config": _spec("eagle3", draft_tensor_parallel_size=1)}, set()),
    # CFG109: dynamic speculative decoding with DP.
    (
        "CFG109",
        "dynamic-dp2",
        {
            "data-parallel-size": 2,
            "speculative-config": _spec("eagle3", num_speculative_tokens_per_batch_size=[[1, 64, 4]]),
        },
        {OLD, NEW},
    ),
    (
        "CFG109",
        "dynamic-dp1",
        {"speculative-config": _spec("eagle3", num_speculative_tokens_per_batch_size=[[1, 64, 4]])},
        set(),
    ),
    # CFG110: block size vs DCP interleave.
    (
        "CFG110",
        "block16-interleave32",
        {
            "tensor-parallel-size": 2,
            "decode-context-parallel-size": 2,
            "block-size": 16,
            "cp-kv-cache-interleave-size": 32,
        },
        {OLD, NEW},
    ),
    (
        "CFG110",
        "block48-interleave32",
        {
            "tensor-parallel-size": 2,
            "decode-context-parallel-size": 2,
            "block-size": 48,
            "cp-kv-cache-interleave-size": 32,
        },
        {OLD, NEW},
    ),
    (
        "CFG110",
        "block64-interleave32",
        {
            "tensor-parallel-size": 2,
            "decode-context-parallel-size": 2,
            "block-size": 64,
            "cp-kv-cache-interleave-size": 32,
        },
        set(),
    ),
    # CFG111 / CFG112: values the served source's enums do not define.
    ("CFG111", "full-decode", {"compilation-config": {"cudagraph_mode": "FULL_DECODE"}}, {OLD, NEW}),
    ("CFG111", "full-and-piecewise", {"compilation-config": {"cudagraph_mode": "full_and_piecewise"}}, set()),
    ("CFG112", "bad-backend", {"attention-backend": "FLASHINFER_MLA_V2"}, {OLD, NEW}),
    ("CFG112", "good-backend", {"attention-backend": "FLASHINFER_MLA"}, set()),
    # CFG113: PCP with DP is refused by 0.28.0 only.
    ("CFG113", "pcp2-dp2", {"prefill-context-parallel-size": 2, "data-parallel-size": 2}, {OLD}),
    ("CFG113", "pcp2-dp1", {"prefill-context-parallel-size": 2}, set()),
    # CFG114: draft metadata under DCP with stale rank-local lengths (SG105 in 0.28.0's shared helper).
    (
        "CFG114",
        "eagle3-dcp2",
        {"tensor-parallel-size": 2, "decode-context-parallel-size": 2, "speculative-config": _spec("eagle3")},
        {OLD},
    ),
    # CFG115: enforce-eager overrides an explicit CUDA graph mode.
    (
        "CFG115",
        "eager-full",
        {"enforce-eager": True, "compilation-config": {"cudagraph_mode": "FULL_AND_PIECEWISE"}},
        {OLD, NEW},
    ),
    (
        "CFG115",
        "eager-none",
        {"enforce-eager": True, "compilation-config": {"cudagraph_mode": "NONE"}},
        set(),
    ),
    ("CFG115", "graphs-no-eager", {"compilation-config": {"cudagraph_mode": "FULL"}}, set()),
    ("CFG114", "eagle3-no-dcp", {"speculative-config": _spec("eagle3")}, set()),
    ("CFG114", "dcp2-no-spec", {"tensor-parallel-size": 2, "decode-context-parallel-size": 2}, set()),
]


@pytest.mark.parametrize("version", [OLD, NEW])
@pytest.mark.parametrize(("code", "name", "config", "fires_on"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_hazard(
    version: str,
    code: str,
    name: str,
    config: dict[str, Any],
    fires_on: set[str],
    facts: Callable[[str], SourceFacts],
    catalogue: Catalogue,
) -> None:
    judgement = evaluate(build(config, "test"), catalogue, facts(version))
    codes = {f.code for f in judgement.findings}
    assert (code in codes) == (version in fires_on), f"{name} on {version}: {sorted(codes)}"
    assert judgement.notes == []


def test_every_case_set_covers_every_code_both_ways() -> None:
    for code in EVALUATORS:
        assert any(c[0] == code and c[3] for c in CASES), f"{code} has no positive case"
        assert any(c[0] == code and c[3] != {OLD, NEW} for c in CASES), f"{code} has no negative case"


def test_cfg101_names_the_findings_and_the_startup_crash(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    cfg = build({"data-parallel-size": 2, "speculative-config": _spec("dflash")}, "t")
    [finding] = [f for f in evaluate(cfg, catalogue, facts(OLD)).findings if f.code == "CFG101"]
    assert finding.severity == "error"
    assert finding.key == "data-parallel-size"
    assert "does not match qo_indptr[-1]" in finding.message
    assert "SG102 at v1/worker/gpu/spec_decode/dflash/speculator.py" in finding.message
    assert "DFlashSpeculator" in finding.message and "vLLM 0.28.0" in finding.message
    assert "data-parallel-size: 1" in finding.fix


def test_cfg101_covers_every_dflash_path_class_the_source_builds(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    # Which classes share the DFlash draft path is read from the served registry, so it differs by version.
    registry = catalogue["CFG101"].params
    for version, expected in (
        (OLD, {"DFlashSpeculator", "DFlash2Speculator"}),
        (NEW, {"DFlashSpeculator", "DFlash2Speculator", "XPressSpeculator", "LiLiCorrSpeculator"}),
    ):
        f = facts(version)
        classes = f.method_speculators(
            registry.registry_file,
            registry.registry_function,  # type: ignore[attr-defined]
            registry.predicate_file,
            registry.predicate_class,
        )["dflash"]  # type: ignore[attr-defined]
        assert {c.name for c in classes if f.descends_from(c, "DFlashSpeculator")} == expected


def test_cfg102_points_at_the_check_in_the_backend(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    cfg = build(
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 2,
            "cp-kv-cache-interleave-size": 16,
            "attention-backend": "FLASHINFER_MLA",
        },
        "t",
    )
    [finding] = [f for f in evaluate(cfg, catalogue, facts(NEW)).findings if f.code == "CFG102"]
    assert finding.key == "cp-kv-cache-interleave-size"
    assert "v1/attention/backends/mla/flashinfer_mla.py:" in finding.message
    assert "cp-kv-cache-interleave-size: 1" in finding.fix


def test_cfg103_says_the_attribute_is_missing(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    cfg = build(
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 4,
            "attention-backend": "FLASHINFER_MLA",
            "speculative-config": _spec("dspark"),
        },
        "t",
    )
    [finding] = [f for f in evaluate(cfg, catalogue, facts(OLD)).findings if f.code == "CFG103"]
    assert "supports_non_causal_multi_token_dcp" in finding.message
    assert "not declared" in finding.message


def test_cfg106_suggests_close_methods(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    cfg = build({"speculative-config": _spec("dflsh")}, "t")
    [finding] = [f for f in evaluate(cfg, catalogue, facts(NEW)).findings if f.code == "CFG106"]
    assert "dflash" in finding.fix


def test_without_a_source_only_config_hazards_are_judged(catalogue: Catalogue) -> None:
    cfg = build(
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 3,
            "data-parallel-size": 2,
            "prefill-context-parallel-size": 1,
            "speculative-config": _spec("dflash"),
        },
        "t",
    )
    judgement = evaluate(cfg, catalogue, None)
    assert {f.code for f in judgement.findings} == {"CFG105"}
    assert "CFG101" in judgement.not_judged and "CFG104" in judgement.not_judged
    assert "CFG105" not in judgement.not_judged
    assert judgement.source is None


# -- hazards follow the source's facts, not its version: a synthetic tree with the fix declared --------------

_BACKEND = """
from vllm.base import BuilderBase


class {builder}(BuilderBase):
    {attr}

    def __init__(self, parallel_config):
        interleave_size = parallel_config.cp_kv_cache_interleave_size
        if parallel_config.decode_context_parallel_size > 1 and interleave_size != {required}:
            raise ValueError("needs interleave")


class FancyBackend:
    @staticmethod
    def get_builder_cls():
        return {builder}
"""


def _synthetic_tree(root: Path, attr: str, required: int = 1) -> Path:
    pkg = root / "vllm"
    (pkg / "v1" / "attention" / "backends").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("__version__ = version = '9.9.9'\n")
    (pkg / "base.py").write_text("class BuilderBase:\n    supports_non_causal_multi_token_dcp = False\n")
    (pkg / "v1" / "attention" / "backends" / "registry.py").write_text(
        "import enum\n\nclass AttentionBackendEnum(enum.Enum):\n"
        '    FLASHINFER_MLA = "vllm.v1.attention.backends.fancy.FancyBackend"\n'
    )
    (pkg / "v1" / "attention" / "backends" / "fancy.py").write_text(
        _BACKEND.format(builder="FancyBuilder", attr=attr, required=required)
    )
    for sub in ("v1/__init__.py", "v1/attention/__init__.py", "v1/attention/backends/__init__.py"):
        (pkg / sub).write_text("")
    return pkg


@pytest.mark.parametrize(
    ("attr", "fires"),
    [
        ("supports_non_causal_multi_token_dcp = True", False),
        ("supports_non_causal_multi_token_dcp: bool = False", True),
        ("pass_through = 1  # inherits False from BuilderBase", True),
    ],
)
def test_cfg103_reads_the_class_attribute_through_inheritance(
    tmp_path: Path, attr: str, fires: bool, catalogue: Catalogue
) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path, attr))
    cfg = build(
        {
            "tensor-parallel-size": 2,
            "decode-context-parallel-size": 2,
            "attention-backend": "FLASHINFER_MLA",
            "speculative-config": _spec("dspark"),
        },
        "t",
    )
    hit = [f for f in evaluate(cfg, catalogue, facts).findings if f.code == "CFG103"]
    assert bool(hit) == fires
    if fires and "inherits" in attr:
        assert "BuilderBase sets it to False" in hit[0].message


@pytest.mark.parametrize(("required", "interleave", "fires"), [(1, 1, False), (1, 4, True), (4, 4, False)])
def test_cfg102_reads_the_required_value_from_the_backend(
    tmp_path: Path, required: int, interleave: int, fires: bool, catalogue: Catalogue
) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path, "x = 1", required=required))
    cfg = build(
        {
            "tensor-parallel-size": 2,
            "decode-context-parallel-size": 2,
            "attention-backend": "FLASHINFER_MLA",
            "cp-kv-cache-interleave-size": interleave,
        },
        "t",
    )
    assert any(f.code == "CFG102" for f in evaluate(cfg, catalogue, facts).findings) == fires


def test_a_source_the_analyzer_cannot_fully_read_is_noted(tmp_path: Path, catalogue: Catalogue) -> None:
    pkg = _synthetic_tree(tmp_path, "x = 1")
    (pkg / "broken.py").write_text("def f(:\n    build_attn_metadata()\n")
    facts = SourceFacts.open(pkg)
    # dspark asks for SG201 findings (CFG104), so the analyzer runs over the tree.
    cfg = build({"speculative-config": _spec("dspark")}, "t")
    judgement = evaluate(cfg, catalogue, facts)
    assert any("broken.py" in note for note in judgement.notes), judgement.notes


def test_a_fact_that_cannot_be_read_costs_one_hazard_not_the_run(
    tmp_path: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path, "x = 1"))

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unexpected registry shape")

    monkeypatch.setattr(SourceFacts, "backend", broken)
    cfg = build(
        {
            "tensor-parallel-size": 4,
            "decode-context-parallel-size": 2,
            "attention-backend": "FLASHINFER_MLA",
            "cp-kv-cache-interleave-size": 4,
            "speculative-config": _spec("dspark"),
        },
        "t",
    )
    judgement = evaluate(cfg, catalogue, facts)
    failed = {n.split()[0] for n in judgement.notes if "reading the source failed (RuntimeError" in n}
    assert failed == {"CFG102", "CFG103"}
    # The other hazards were still judged (the synthetic tree's registry does know FLASHINFER_MLA).
    assert "CFG112" not in {f.code for f in judgement.findings}
