"""The hazard catalogue is validated data: a malformed one names the file, the key and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.deploy.catalogue import PARAMS, EvidenceParams, load_catalogue
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


def test_the_four_issue_hazards_need_the_source_and_evidence_hazards_do_not() -> None:
    catalogue = load_catalogue()
    for code in ("CFG101", "CFG102", "CFG103", "CFG104"):
        assert catalogue[code].needs_source
    assert not catalogue["CFG105"].needs_source
    assert isinstance(catalogue["CFG105"].params, EvidenceParams)


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
            "hazard 'CFG101.params.draft_path_klass': unknown key (did you mean 'draft_path_class'?)",
        ),
        ("[hazards.CFG113]", "[hazards.CFG999]", "hazard 'CFG999': unknown code"),
        ('kind = "warning"', 'kind = "log"', "hazard 'CFG109.params.evidence.kind'"),
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


def test_an_edited_catalogue_changes_what_is_said(tmp_path: Path) -> None:
    from specguard.deploy.hazards import evaluate
    from specguard.deploy.load import build

    path = _write(
        tmp_path,
        BUILTIN.replace('text = "must be divisible by dcp_size"', 'text = "must be divisible by dcp_size"', 1).replace(
            "choose decode-context-parallel-size among", "pick DCP from", 1
        ),
    )
    cfg = build({"tensor-parallel-size": 4, "decode-context-parallel-size": 3}, "t")
    [finding] = evaluate(cfg, load_catalogue(path), None).findings
    assert finding.fix == "pick DCP from the divisors of tensor-parallel-size (1, 2, 4)"
