"""Each hazard, positive and negative, judged against the real vLLM 0.28.0, 0.30.0 and 0.33.0 sources."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specguard.composition import check_served_tree
from specguard.deploy.catalogue import Catalogue
from specguard.deploy.facts import SourceFacts
from specguard.deploy.hazards import ENV_NOTE, EVALUATORS, Context, Judgement, _speculators, evaluate
from specguard.deploy.load import build, load

OLD, MID, NEW = "0.28.0", "0.30.0", "0.33.0"
ALL = {OLD, MID, NEW}


def judge(argv: list[str], facts: SourceFacts, catalogue: Catalogue) -> Judgement:
    """`specguard config -- m ARGV` against a source, as the CLI reads it."""
    return evaluate(load(None, ["m", *argv], facts).config, catalogue, facts)


def _spec(method: str, **extra: Any) -> list[str]:
    return ["-sc", json.dumps({"method": method, "model": "some/draft", "num_speculative_tokens": 4, **extra})]


DSPARK_DCP = ["-tp", "2", "-dcp", "2", *_spec("dspark")]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2}

# (code, name, vllm serve arguments, versions it must fire on); every case is checked on all three versions.
CASES: list[tuple[str, str, list[str], set[str]]] = [
    # CFG101: DFlash-family draft + DP>1 where the source has SG103 on that draft path (0.28.0 only).
    ("CFG101", "dflash-dp2", ["-dp", "2", *_spec("dflash")], {OLD}),
    ("CFG101", "dspark-dp2", ["-dp", "2", *_spec("dspark")], {OLD}),
    ("CFG101", "dflash-dp1", _spec("dflash"), set()),
    # EAGLE has SG103 findings in 0.28.0 too, but it is not on the DFlash draft path (CFG117 says it).
    ("CFG101", "eagle3-dp2", ["-dp", "2", *_spec("eagle3")], set()),
    ("CFG101", "dp2-no-spec", ["-dp", "2"], set()),
    # CFG102: FlashInfer MLA's builder refuses a DCP interleave other than 1 since 0.30.0.
    (
        "CFG102",
        "fimla-dcp-interleave16",
        ["-tp", "4", "-dcp", "2", "--cp-kv-cache-interleave-size", "16", "--attention-backend", "FLASHINFER_MLA"],
        {MID, NEW},
    ),
    # The deprecated dcp option overrides the cp one only for KV-transfer instances since 0.30.0 (issue item 1).
    (
        "CFG102",
        "fimla-dcp-deprecated-key",
        ["-tp", "4", "-dcp", "2", "--dcp-kv-cache-interleave-size", "8", "--attention-backend", "flashinfer_mla"],
        set(),
    ),
    (
        "CFG102",
        "fimla-dcp-interleave1",
        ["-tp", "4", "-dcp", "2", "--cp-kv-cache-interleave-size", "1", "--attention-backend", "FLASHINFER_MLA"],
        set(),
    ),
    (
        "CFG102",
        "flashmla-dcp-interleave16",
        ["-tp", "4", "-dcp", "2", "--cp-kv-cache-interleave-size", "16", "--attention-backend", "FLASHMLA"],
        set(),
    ),
    ("CFG102", "fimla-no-dcp", ["--cp-kv-cache-interleave-size", "16", "--attention-backend", "FLASHINFER_MLA"], set()),
    # CFG103: DSpark + DCP on a backend whose metadata builder refuses it (the validation exists since 0.30.0).
    ("CFG103", "dspark-dcp-triton-mla", [*DSPARK_DCP, "--attention-backend", "TRITON_MLA"], {MID, NEW}),
    ("CFG103", "dspark-dcp-flashmla", [*DSPARK_DCP, "--attention-backend", "FLASHMLA"], {MID, NEW}),
    (
        "CFG103",
        "dspark-dcp-fimla-both",
        [
            "-tp",
            "2",
            "-dcp",
            "2",
            "--attention-backend",
            "FLASHINFER_MLA",
            *_spec("dspark", attention_backend="FLASHINFER_MLA"),
        ],
        set(),
    ),
    (
        "CFG103",
        "dspark-draft-triton",
        [
            "-tp",
            "2",
            "-dcp",
            "2",
            "--attention-backend",
            "FLASHINFER_MLA",
            *_spec("dspark", attention_backend="TRITON_MLA"),
        ],
        {MID, NEW},
    ),
    (
        "CFG103",
        "dflash-dcp-triton-mla",
        ["-tp", "2", "-dcp", "2", "--attention-backend", "TRITON_MLA", *_spec("dflash")],
        set(),
    ),
    ("CFG103", "dspark-triton-no-dcp", ["--attention-backend", "TRITON_MLA", *_spec("dspark")], set()),
    # CFG104: non-causal draft where the source merges KV-cache group flags with any() (all three).
    ("CFG104", "dspark", _spec("dspark"), ALL),
    ("CFG104", "dflash", _spec("dflash"), set()),
    # CFG105: the parallel layout's own validation, both branches (PCP off and on; issue item 5).
    ("CFG105", "tp4-dcp3", ["-tp", "4", "-dcp", "3"], ALL),
    ("CFG105", "tp4-dcp2", ["-tp", "4", "-dcp", "2"], set()),
    ("CFG105", "tp2-pcp2-dcp3", ["-tp", "2", "-pcp", "2", "-dcp", "3"], ALL),
    ("CFG105", "tp2-pcp2-dcp4", ["-tp", "2", "-pcp", "2", "-dcp", "4"], set()),
    # CFG106: a method the served source does not accept (medusa was dropped after 0.30.0).
    ("CFG106", "medusa", _spec("medusa"), {NEW}),
    ("CFG106", "typo-method", _spec("dflsh"), ALL),
    ("CFG106", "dflash", _spec("dflash"), set()),
    # CFG107: draft TP other than 1 or the target's, for model-based drafts only (issue item 4).
    ("CFG107", "eagle3-draft-tp2-tp4", ["-tp", "4", *_spec("eagle3", draft_tensor_parallel_size=2)], ALL),
    ("CFG107", "eagle3-draft-tp1-tp4", ["-tp", "4", *_spec("eagle3", draft_tensor_parallel_size=1)], set()),
    (
        "CFG107",
        "ngram-draft-tp2-tp4",
        ["-tp", "4", "-sc", '{"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}'],
        set(),
    ),
    # CFG108: tensor_parallel_size inside speculative-config.
    ("CFG108", "spec-tp", _spec("eagle3", tensor_parallel_size=2), ALL),
    ("CFG108", "spec-draft-tp", _spec("eagle3", draft_tensor_parallel_size=1), set()),
    # CFG109: dynamic speculative decoding with DP.
    ("CFG109", "dynamic-dp2", ["-dp", "2", *_spec("eagle3", num_speculative_tokens_per_batch_size=[[1, 64, 4]])], ALL),
    ("CFG109", "dynamic-dp1", _spec("eagle3", num_speculative_tokens_per_batch_size=[[1, 64, 4]]), set()),
    # CFG110: block size vs the DCP interleave size as vLLM resolves it.
    (
        "CFG110",
        "block16-interleave32",
        ["-tp", "2", "-dcp", "2", "--block-size", "16", "--cp-kv-cache-interleave-size", "32"],
        ALL,
    ),
    (
        "CFG110",
        "block48-interleave32",
        ["-tp", "2", "-dcp", "2", "--block-size", "48", "--cp-kv-cache-interleave-size", "32"],
        ALL,
    ),
    (
        "CFG110",
        "block64-interleave32",
        ["-tp", "2", "-dcp", "2", "--block-size", "64", "--cp-kv-cache-interleave-size", "32"],
        set(),
    ),
    # The deprecated dcp interleave overrides the cp one before the check in 0.28.0 only (issue item 1).
    (
        "CFG110",
        "block16-dcp-interleave64",
        ["-tp", "8", "-dcp", "2", "--block-size", "16", "--dcp-kv-cache-interleave-size", "64"],
        {OLD},
    ),
    # Since 0.30.0 the check is skipped under NIXL P/D, where the interleave follows the block size.
    (
        "CFG110",
        "block16-interleave32-nixl",
        [
            "-tp",
            "2",
            "-dcp",
            "2",
            "--block-size",
            "16",
            "--cp-kv-cache-interleave-size",
            "32",
            "--kv-transfer-config",
            '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}',
        ],
        {OLD},
    ),
    # CFG112: attention backends the served enum does not define (for the target and for the draft).
    ("CFG112", "bad-backend", ["--attention-backend", "FLASHINFER_MLA_V2"], ALL),
    ("CFG112", "bad-draft-backend", _spec("dspark", attention_backend="NO_SUCH_MLA"), ALL),
    ("CFG112", "good-backend", ["--attention-backend", "FLASHINFER_MLA"], set()),
    # CFG113: PCP with DP: refused by 0.28.0's parallel config and by 0.30.0's CUDA platform (issue item 3).
    ("CFG113", "pcp2-dp2", ["-pcp", "2", "-dp", "2"], {OLD, MID}),
    ("CFG113", "pcp2-dp1", ["-pcp", "2"], set()),
    # CFG114: draft metadata under DCP with stale rank-local lengths (SG105 in 0.28.0's shared helper).
    ("CFG114", "eagle3-dcp2", ["-tp", "2", "-dcp", "2", *_spec("eagle3")], {OLD}),
    ("CFG114", "eagle3-no-dcp", _spec("eagle3"), set()),
    ("CFG114", "dcp2-no-spec", ["-tp", "2", "-dcp", "2"], set()),
    # CFG117: the same padded count on a draft path other than DFlash's (EAGLE's, in 0.28.0): a warning.
    ("CFG117", "eagle3-dp2", ["-dp", "2", *_spec("eagle3")], {OLD}),
    ("CFG117", "eagle3-dp1", _spec("eagle3"), set()),
    ("CFG117", "dflash-dp2", ["-dp", "2", *_spec("dflash")], set()),  # CFG101's
    # CFG115: enforce-eager overrides an explicit CUDA graph mode.
    ("CFG115", "eager-full", ["--enforce-eager", "-cc", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'], ALL),
    ("CFG115", "eager-none", ["--enforce-eager", "-cc", '{"cudagraph_mode": "NONE"}'], set()),
    ("CFG115", "graphs-no-eager", ["-cc", '{"cudagraph_mode": "FULL"}'], set()),
    # CFG118: what SpeculativeConfig's own validation refuses outside the statements other hazards name.
    ("CFG118", "tokens-without-model", ["-sc", '{"num_speculative_tokens": 4}'], ALL),
    ("CFG118", "ngram-lookup-reversed", ["-sc", json.dumps(NGRAM | {"prompt_lookup_min": 3})], ALL),
    ("CFG118", "ngram-lookup", ["-sc", json.dumps(NGRAM)], set()),
    ("CFG118", "draft-tp-bad", ["-tp", "2", *_spec("eagle3", draft_tensor_parallel_size=3)], set()),  # CFG107's
]


@pytest.mark.parametrize("version", [OLD, MID, NEW])
@pytest.mark.parametrize(("code", "name", "argv", "fires_on"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_hazard(
    version: str,
    code: str,
    name: str,
    argv: list[str],
    fires_on: set[str],
    facts: Callable[[str], SourceFacts],
    catalogue: Catalogue,
) -> None:
    judgement = judge(argv, facts(version), catalogue)
    codes = {f.code for f in judgement.findings}
    assert (code in codes) == (version in fires_on), f"{name} on {version}: {sorted(codes)} {judgement.not_judged}"
    if (code, version, name) in UNJUDGED_BY_MEANING:
        # The release has no statement with the catalogued text (0.28.0: no DSpark DCP validation; 0.33.0: PCP
        # with DP is no longer refused) and none found by meaning refuses the config: not judged, said, never a
        # clean that rests on a statement not being found.
        assert judgement.not_judged[code].startswith("no statement saying "), judgement.not_judged[code]
        return
    assert code not in judgement.not_judged, judgement.not_judged[code]
    # A verdict reached without the catalogued statement's text says how it was judged instead; one that rests on
    # the model runner an unset variable picks says so; nothing else (besides the serving environment's note).
    own = [n for n in judgement.notes if not n.startswith(ENV_NOTE)]
    assert all(
        n.startswith(f"{code}: no statement saying ")
        and "judged by meaning" in n
        or n.startswith(f"{code}: no hazard for the V1 model runner, which")
        # a written method the served source re-derives from the draft model's config (test_served_method.py)
        or n.startswith("judged for speculative-config.method ")
        or n.startswith("speculative-config.method is one of ")  # each method it may derive is judged
        # a method left out, derived by the served source (test_served_method.py)
        or n.startswith("speculative-config.method is 'draft_model' as ")
        for n in own
    ), own


UNJUDGED_BY_MEANING = {
    ("CFG103", OLD, "dspark-dcp-triton-mla"),
    ("CFG103", OLD, "dspark-dcp-flashmla"),
    ("CFG103", OLD, "dflash-dcp-triton-mla"),
    ("CFG103", OLD, "dspark-dcp-fimla-both"),
    ("CFG103", OLD, "dspark-draft-triton"),
    ("CFG113", NEW, "pcp2-dp2"),
}


def test_every_code_has_cases_both_ways() -> None:
    for code in EVALUATORS:
        if code == "CFG111":
            continue  # the real sources refuse a bad cudagraph_mode while parsing; see the synthetic test below
        if code == "CFG116":
            continue  # a serving environment's value, not an argument: test_environment_values.py, both ways
        assert any(c[0] == code and c[3] for c in CASES), f"{code} has no positive case"
        assert any(c[0] == code and c[3] != ALL for c in CASES), f"{code} has no negative case"


def test_cfg101_names_the_findings_and_the_startup_crash(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    [finding] = [f for f in judge(["-dp", "2", *_spec("dflash")], facts(OLD), catalogue).findings if f.code == "CFG101"]
    assert finding.severity == "error"
    assert finding.key == "data-parallel-size"
    assert "does not match qo_indptr[-1]" in finding.message
    assert "SG103 at v1/worker/gpu/spec_decode/dflash/speculator.py" in finding.message  # the count, not SG102
    assert "DFlashSpeculator" in finding.message and "vLLM 0.28.0" in finding.message
    assert "data-parallel-size: 1" in finding.fix


def test_cfg101_covers_every_dflash_path_class_the_source_builds(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    # Which classes share the DFlash draft path is read from the served (V2) registry, so it differs by version.
    p = catalogue["CFG101"].params
    for version, expected in (
        (OLD, {"DFlashSpeculator", "DFlash2Speculator"}),
        (NEW, {"DFlashSpeculator", "DFlash2Speculator", "XPressSpeculator", "LiLiCorrSpeculator"}),
    ):
        f = facts(version)
        cfg = load(None, ["m", *_spec("dflash")], f).config
        classes = _speculators(Context(cfg, f), p.registries[0])  # type: ignore[attr-defined]
        assert {c.name for c in classes if f.descends_from(c, "DFlashSpeculator")} == expected


def test_cfg102_points_at_the_check_in_the_backend(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    argv = ["-tp", "4", "-dcp", "2", "--cp-kv-cache-interleave-size", "16", "--attention-backend", "FLASHINFER_MLA"]
    [finding] = [f for f in judge(argv, facts(NEW), catalogue).findings if f.code == "CFG102"]
    assert finding.key == "cp-kv-cache-interleave-size"
    assert "v1/attention/backends/mla/flashinfer_mla.py:" in finding.message
    assert "FlashInfer MLA native DCP requires cp_kv_cache_interleave_size=1" in finding.message
    assert "cp-kv-cache-interleave-size: 1" in finding.fix


def test_cfg102_follows_the_deprecated_key_where_the_source_copies_it(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    argv = ["-tp", "4", "-dcp", "2", "--dcp-kv-cache-interleave-size", "8", "--attention-backend", "FLASHINFER_MLA"]
    # 0.28.0 copies the dcp interleave over the cp one for every DCP config (its builder has no check, though);
    # 0.33.0 copies it for KV-transfer instances only, once the engine has the KV-cache groups (not empty for
    # any model with attention, but not something a serving config decides).
    kv = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'
    judgement = judge([*argv, "--kv-transfer-config", kv], facts(NEW), catalogue)
    assert "CFG102" not in {f.code for f in judgement.findings}
    assert "kv_cache_groups" in judgement.not_judged["CFG102"]
    assert "CFG102" not in judge(argv, facts(NEW), catalogue).not_judged


def test_cfg103_says_which_builder_refuses_and_why(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    [finding] = [
        f
        for f in judge([*DSPARK_DCP, "--attention-backend", "TRITON_MLA"], facts(NEW), catalogue).findings
        if f.code == "CFG103"
    ]
    assert "TritonMLAMetadataBuilder" in finding.message and "target" in finding.message
    assert "model_executor/layers/attention/mla_attention.py:" in finding.message
    assert "MLA attention for DSpark with decode context parallelism" in finding.message


def test_cfg103_an_unknown_draft_backend_is_not_judged(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    # The target's builder accepts it; the draft's backend is chosen at startup from the draft model.
    judgement = judge([*DSPARK_DCP, "--attention-backend", "FLASHINFER_MLA"], facts(NEW), catalogue)
    assert "CFG103" not in {f.code for f in judgement.findings}
    assert "set speculative-config.attention_backend" in judgement.not_judged["CFG103"]
    # A source without the validation's text is judged by meaning: the target's builder is evaluated, the draft's
    # (chosen at startup) cannot be, so it is not judged either, and says why.
    old = judge([*DSPARK_DCP, "--attention-backend", "FLASHINFER_MLA"], facts(OLD), catalogue)
    assert "draft's attention backend (chosen at startup)" in old.not_judged["CFG103"]
    assert "no statement saying" in old.not_judged["CFG103"]


def test_cfg105_lists_the_sizes_the_source_accepts(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    [pcp_off] = [f for f in judge(["-tp", "4", "-dcp", "3"], facts(NEW), catalogue).findings if f.code == "CFG105"]
    assert pcp_off.fix.endswith("1, 2, 4")
    assert "must be divisible by dcp_size" in pcp_off.message
    [pcp_on] = [
        f for f in judge(["-tp", "2", "-pcp", "2", "-dcp", "3"], facts(NEW), catalogue).findings if f.code == "CFG105"
    ]
    assert pcp_on.fix.endswith("1, 2, 4")
    assert "When PCP is enabled" in pcp_on.message


def test_cfg106_suggests_close_methods(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    [finding] = [f for f in judge(_spec("dflsh"), facts(NEW), catalogue).findings if f.code == "CFG106"]
    assert "dflash" in finding.fix


def test_cfg113_names_where_each_release_refuses(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    for version, where in ((OLD, "config/parallel.py:"), (MID, "platforms/cuda.py:")):
        [finding] = [
            f for f in judge(["-pcp", "2", "-dp", "2"], facts(version), catalogue).findings if f.code == "CFG113"
        ]
        assert where in finding.message, finding.message


def test_cfg110_without_a_block_size_is_not_judged(facts: Callable[[str], SourceFacts], catalogue: Catalogue) -> None:
    judgement = judge(["-tp", "2", "-dcp", "2", "--cp-kv-cache-interleave-size", "32"], facts(NEW), catalogue)
    assert "set block-size to judge it" in judgement.not_judged["CFG110"]


def test_without_a_source_nothing_is_judged(catalogue: Catalogue) -> None:
    cfg = build({"tensor_parallel_size": 4, "decode_context_parallel_size": 3}, "t")
    judgement = evaluate(cfg, catalogue, None)
    assert judgement.findings == []
    assert set(judgement.not_judged) == set(catalogue.hazards)
    assert judgement.source is None


# -- hazards follow the source's facts, not its version: a synthetic tree --------------------------------------

_BASE = """
class BuilderBase:
    supports_non_causal_multi_token_dcp = False

    def __init__(self, vllm_config, supports_dcp_with_varlen=False):
        self.vllm_config = vllm_config
        self.non_causal_multi_token_decode = layer_flags()
        self._check(supports_dcp_with_varlen)

    def _check(self, supports_dcp_with_varlen):
        spec = self.vllm_config.speculative_config
        dcp = self.vllm_config.parallel_config.decode_context_parallel_size
        if spec is None or spec.method != "dspark" or dcp <= 1:
            return
        supported = supports_dcp_with_varlen
        if self.non_causal_multi_token_decode:
            supported = self.supports_non_causal_multi_token_dcp
        if not supported:
            raise ValueError("no MLA attention for DSpark with decode context parallelism here")
"""

_BACKEND = """
from vllm.base import BuilderBase


class FancyBuilder(BuilderBase):
    {attr}

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        interleave_size = vllm_config.parallel_config.cp_kv_cache_interleave_size
        if vllm_config.parallel_config.decode_context_parallel_size > 1 and interleave_size != {required}:
            raise ValueError("needs interleave")
        super().__init__(vllm_config, supports_dcp_with_varlen={varlen})


class FancyBackend:
    @staticmethod
    def get_builder_cls():
        return FancyBuilder
"""

_COMPILATION = """
import enum


class CUDAGraphMode(enum.Enum):
    NONE = 0
    FULL = 2


class CompilationConfig:
    cudagraph_mode: CUDAGraphMode | None = None
"""

_CONFIG = """
from vllm.config.compilation import CompilationConfig, CUDAGraphMode


class ParallelConfig:
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    cp_kv_cache_interleave_size: int = 1
    dcp_kv_cache_interleave_size: int = 1

    def validate(self):
        if self.prefill_context_parallel_size > 1 and self.data_parallel_size > 1:
            raise ValueError("PCP does not support data parallelism in this fork")


class CacheConfig:
    block_size: int | None = None


class SpeculativeConfig:
    method: str | None = None


class AttentionConfig:
    backend: "AttentionBackendEnum | None" = None


class VllmConfig:
    parallel_config: ParallelConfig
    speculative_config: SpeculativeConfig | None = None
"""


def _synthetic_tree(root: Path, attr: str = "x = 1", required: int = 1, varlen: str = "False") -> Path:
    pkg = root / "vllm"
    (pkg / "v1" / "attention" / "backends").mkdir(parents=True)
    (pkg / "config").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("__version__ = version = '9.9.9'\n")
    (pkg / "config" / "__init__.py").write_text(_CONFIG)
    (pkg / "config" / "compilation.py").write_text(_COMPILATION)
    (pkg / "base.py").write_text(_BASE)
    (pkg / "v1" / "attention" / "backends" / "registry.py").write_text(
        "import enum\n\nclass AttentionBackendEnum(enum.Enum):\n"
        '    FLASHINFER_MLA = "vllm.v1.attention.backends.fancy.FancyBackend"\n'
    )
    (pkg / "v1" / "attention" / "backends" / "fancy.py").write_text(
        _BACKEND.format(attr=attr, required=required, varlen=varlen)
    )
    for sub in ("v1/__init__.py", "v1/attention/__init__.py", "v1/attention/backends/__init__.py"):
        (pkg / sub).write_text("")
    return pkg


def _fancy(facts: SourceFacts, catalogue: Catalogue, **values: Any) -> Judgement:
    return evaluate(build({"attention_backend": "FLASHINFER_MLA", **values}, "t"), catalogue, facts)


@pytest.mark.parametrize(
    ("attr", "varlen", "draft_backend", "fires"),
    [
        # The target's builder passes supports_dcp_with_varlen=False: refused whatever the draft does.
        ("supports_non_causal_multi_token_dcp = True", "False", None, True),
        # The target passes; the draft uses the same backend, whose class declares non-causal DCP support.
        ("supports_non_causal_multi_token_dcp = True", "True", "FLASHINFER_MLA", False),
        # The draft's builder inherits the base's False.
        ("pass_through = 1", "True", "FLASHINFER_MLA", True),
        # The same through a literal-valued condition on the interleave size.
        ("supports_non_causal_multi_token_dcp: bool = True", "interleave_size == 1", "FLASHINFER_MLA", False),
    ],
)
def test_cfg103_reads_both_capabilities_from_the_source(
    tmp_path: Path, attr: str, varlen: str, draft_backend: str | None, fires: bool, catalogue: Catalogue
) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path, attr, varlen=varlen))
    spec = {"method": "dspark", "num_speculative_tokens": 4}
    if draft_backend:
        spec["attention_backend"] = draft_backend
    judgement = _fancy(
        facts, catalogue, tensor_parallel_size=2, decode_context_parallel_size=2, speculative_config=spec
    )
    assert ("CFG103" in {f.code for f in judgement.findings}) == fires, judgement.not_judged


@pytest.mark.parametrize(("required", "interleave", "fires"), [(1, 1, False), (1, 4, True), (4, 4, False)])
def test_cfg102_reads_the_required_value_from_the_backend(
    tmp_path: Path, required: int, interleave: int, fires: bool, catalogue: Catalogue
) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path, required=required))
    judgement = _fancy(
        facts, catalogue, tensor_parallel_size=2, decode_context_parallel_size=2, cp_kv_cache_interleave_size=interleave
    )
    hits = [f for f in judgement.findings if f.code == "CFG102"]
    assert bool(hits) == fires
    if fires:
        assert f"set cp-kv-cache-interleave-size: {required}" in hits[0].fix


def test_cfg113_follows_the_refusal_wherever_the_source_puts_it(tmp_path: Path, catalogue: Catalogue) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path))
    judgement = evaluate(build({"prefill_context_parallel_size": 2, "data_parallel_size": 2}, "t"), catalogue, facts)
    [finding] = [f for f in judgement.findings if f.code == "CFG113"]
    assert "config/__init__.py:" in finding.message and "in this fork" in finding.message


def test_cfg111_when_the_source_parses_the_mode_at_startup(tmp_path: Path, catalogue: Catalogue) -> None:
    # Real releases refuse an unknown mode while parsing (the reading test covers that); a source whose mode is
    # only checked later gets the hazard instead.
    facts = SourceFacts.open(_synthetic_tree(tmp_path))
    judgement = evaluate(build({"compilation_config": {"cudagraph_mode": "FULL_DECODE"}}, "t"), catalogue, facts)
    [finding] = [f for f in judgement.findings if f.code == "CFG111"]
    assert "NONE, FULL" in finding.fix


def test_a_source_the_analyzer_cannot_fully_read_is_noted(tmp_path: Path, catalogue: Catalogue) -> None:
    pkg = _synthetic_tree(tmp_path)
    (pkg / "broken.py").write_text("def f(:\n    build_attn_metadata()\n")
    facts = SourceFacts.open(pkg, check_served_tree)
    # dspark asks for SG201 findings (CFG104), so the analyzer runs over the tree.
    judgement = evaluate(build({"speculative_config": {"method": "dspark"}}, "t"), catalogue, facts)
    assert any("broken.py" in note for note in judgement.notes), judgement.notes


def test_without_an_analyzer_handed_in_a_hazard_on_findings_is_not_judged(tmp_path: Path, catalogue: Catalogue) -> None:
    """deploy/ never runs the engine itself (issue 27): the composition hands it the check. Without one, a hazard
    that depends on a finding says so; it is never passed."""
    facts = SourceFacts.open(_synthetic_tree(tmp_path))
    judgement = evaluate(build({"speculative_config": {"method": "dspark"}}, "t"), catalogue, facts)
    assert "CFG104" not in {f.code for f in judgement.findings}
    assert "`specguard check` was not run on the served source" in judgement.not_judged["CFG104"]


def test_a_fact_that_cannot_be_read_costs_one_hazard_not_the_run(
    tmp_path: Path, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = SourceFacts.open(_synthetic_tree(tmp_path))

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("unexpected registry shape")

    monkeypatch.setattr(SourceFacts, "backend", broken)
    judgement = _fancy(
        facts,
        catalogue,
        tensor_parallel_size=4,
        decode_context_parallel_size=2,
        cp_kv_cache_interleave_size=4,
        speculative_config={"method": "dspark", "attention_backend": "FLASHINFER_MLA"},
    )
    # Not judged (an exit 3 under --strict), not a note beside a clean verdict.
    failed = {code for code, why in judgement.not_judged.items() if "reading the source failed (RuntimeError" in why}
    assert failed == {"CFG102", "CFG103"}
    # The other hazards were still judged (the synthetic tree's registry does know FLASHINFER_MLA).
    assert "CFG112" not in {f.code for f in judgement.findings}


def test_what_create_engine_config_derives_is_evaluated(
    facts: Callable[[str], SourceFacts], catalogue: Catalogue
) -> None:
    """Issue #19 item 4: with a NIXL connector, vLLM 0.33.0 auto-resolves the DCP interleave size only when the
    option was not given (`_allow_auto_resolve_cp_interleave_size=(self.cp_kv_cache_interleave_size is None)` in
    EngineArgs.create_engine_config), from the kernel block size known only at startup."""
    nixl = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    base = ["-tp", "4", "-dcp", "2", "--attention-backend", "FLASHINFER_MLA", "--kv-transfer-config", nixl]
    base += ["--block-size", "64"]
    given_one = judge([*base, "--cp-kv-cache-interleave-size", "1"], facts(NEW), catalogue)
    assert "CFG102" not in {f.code for f in given_one.findings} and "CFG102" not in given_one.not_judged
    given_16 = judge([*base, "--cp-kv-cache-interleave-size", "16"], facts(NEW), catalogue)
    assert "CFG102" in {f.code for f in given_16.findings}
    resolved_at_startup = judge(base, facts(NEW), catalogue)
    assert "local_block_size" in resolved_at_startup.not_judged["CFG102"]
