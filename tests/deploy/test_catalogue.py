"""The hazard catalogue is validated data: a malformed one names the file, the key and the problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specguard.deploy.catalogue import PARAMS, EvidenceParams, load_catalogue
from specguard.deploy.facts import SourceFacts
from specguard.deploy.hazards import EVALUATORS
from specguard.errors import UserError

REPO = Path(__file__).resolve().parents[2]
BUILTIN = (REPO / "rules" / "hazards.toml").read_text(encoding="utf-8")


def test_builtin_catalogue_has_every_code_with_an_evaluator() -> None:
    catalogue = load_catalogue()
    assert set(catalogue.hazards) == set(PARAMS) == set(EVALUATORS)
    for code, hazard in catalogue.hazards.items():
        assert hazard.severity in ("error", "warning", "info")
        assert hazard.message and hazard.fix, code
    assert catalogue["CFG101"].severity == "error"
    assert catalogue["CFG104"].severity == "warning"


def test_validation_hazards_name_the_statements_that_decide_them() -> None:
    catalogue = load_catalogue()
    for code in ("CFG105", "CFG107", "CFG108", "CFG109", "CFG110", "CFG113", "CFG115"):
        params = catalogue[code].params
        assert isinstance(params, EvidenceParams) and params.evidence, code
    # Both branches of the parallel layout's validation (PCP off and on).
    assert len(catalogue["CFG105"].params.evidence) == 2  # type: ignore[attr-defined]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hazards.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'severity = "warning"\nmessage = """speculative method \'{method}\' uses',
            'severity = "fatal"\nmessage = """speculative method \'{method}\' uses',
            "hazard 'CFG104.severity': Input should be 'error', 'warning' or 'info'",
        ),
        (
            'methods = ["dspark"]\nrules = ["SG201"]',
            'methods = []\nrules = ["SG201"]',
            "hazard 'CFG104.params.methods'",
        ),
        (
            'draft_path_class = "DFlashSpeculator"',
            'draft_path_klass = "DFlashSpeculator"',
            "hazard 'CFG101.params.registries.0.draft_path_klass': unknown key (did you mean 'draft_path_class'?)",
        ),
        (
            'draft_path_class = "DFlashProposer"\n',
            "",
            "hazard 'CFG101.params': Value error, registries of the V1 model runner need a draft_path_class",
        ),
        ("[hazards.CFG113]", "[hazards.CFG999]", "hazard 'CFG999': unknown code"),
        ('kind = "warning"', 'kind = "log"', "hazard 'CFG109.params.evidence.0.kind'"),
        ('text = "PCP does not support data parallelism"', 'text = "PCP"', "CFG113.params.evidence.0.text"),
        ('fix = "use one of: {accepted}"', 'fix = "use one of: {accepted[0]}"', "is not a plain name"),
    ],
)
def test_malformed_catalogue_names_file_key_and_problem(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in BUILTIN, old
    path = _write(tmp_path, BUILTIN.replace(old, new, 1))
    with pytest.raises(UserError) as info:
        load_catalogue(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert expected in message, message


def test_missing_hazard_is_an_error(tmp_path: Path) -> None:
    head, _, _ = BUILTIN.partition("[hazards.CFG115]")
    with pytest.raises(UserError, match="hazard 'CFG115' is missing"):
        load_catalogue(_write(tmp_path, head))


def test_invalid_toml_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not valid TOML"):
        load_catalogue(_write(tmp_path, "[hazards.CFG101\n"))


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown top-level key 'rules'"):
        load_catalogue(_write(tmp_path, BUILTIN + "\n[rules]\nx = 1\n"))


def test_an_edited_catalogue_changes_what_is_said(tmp_path: Path, facts: Callable[[str], SourceFacts]) -> None:
    from specguard.deploy.hazards import evaluate
    from specguard.deploy.load import build

    path = _write(tmp_path, BUILTIN.replace("choose decode-context-parallel-size among", "pick DCP from", 1))
    cfg = build({"tensor_parallel_size": 4, "decode_context_parallel_size": 3}, "t")
    [finding] = [f for f in evaluate(cfg, load_catalogue(path), facts("0.33.0")).findings if f.code == "CFG105"]
    assert finding.fix == "pick DCP from the sizes this layout accepts: 1, 2, 4"


def test_a_placeholder_with_no_fact_behind_it_stays_as_written(
    tmp_path: Path, facts: Callable[[str], SourceFacts]
) -> None:
    """A catalogue passed with --hazards may name a fact no evaluator finds: the verdict keeps `{name}`, and the
    run goes on (it raised KeyError out of the run before)."""
    from specguard.deploy.hazards import evaluate
    from specguard.deploy.load import build

    path = _write(tmp_path, BUILTIN.replace("choose decode-context-parallel-size among", "see {runbook}: choose", 1))
    cfg = build({"tensor_parallel_size": 4, "decode_context_parallel_size": 3}, "t")
    [finding] = [f for f in evaluate(cfg, load_catalogue(path), facts("0.33.0")).findings if f.code == "CFG105"]
    assert finding.fix == "see {runbook}: choose the sizes this layout accepts: 1, 2, 4"


def test_an_evidence_text_the_source_does_not_have_is_judged_by_meaning(
    tmp_path: Path, facts: Callable[[str], SourceFacts]
) -> None:
    from specguard.deploy.hazards import evaluate
    from specguard.deploy.load import build

    # A catalogue whose text the source does not have (as for a fork that rewords the refusal): the statement that
    # refuses this layout and not DCP 1 is found by what it does, and the verdict says it was judged that way.
    path = _write(
        tmp_path, BUILTIN.replace('text = "must be divisible by dcp_size"', 'text = "not divisible in our fork"')
    )
    cfg = build({"tensor_parallel_size": 4, "decode_context_parallel_size": 3}, "t")
    judgement = evaluate(cfg, load_catalogue(path), facts("0.33.0"))
    [finding] = [f for f in judgement.findings if f.code == "CFG105"]
    assert "must be divisible by dcp_size" in finding.message
    assert any(n.startswith('CFG105: no statement saying "not divisible in our fork"') for n in judgement.notes)
