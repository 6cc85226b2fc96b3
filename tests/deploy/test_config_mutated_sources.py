"""`specguard config` on forks of real releases (issue #19): a check reworded, moved to another module, written
through a local, wrapped in try/except, a registry renamed, an option given only as a YAML dotted key. Each gives the
right verdict, or "not judged" naming what was not found: never a silent clean."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork, replace, rewrite, through_method, wrap_in_try

from specguard.composition import check_served_tree
from specguard.deploy.catalogue import load_catalogue
from specguard.deploy.facts import SourceFacts
from specguard.deploy.hazards import Judgement, evaluate
from specguard.deploy.load import load

DCP_CHECK_033 = (
    "            if tp % dcp != 0:\n"
    '                raise ValueError(f"tp_size={tp} must be divisible by dcp_size={dcp}.")\n'
)
PCP_DP_028 = (
    "        if pcp > 1 and self.data_parallel_size > 1:\n"
    '            raise ValueError("PCP does not support data parallelism yet.")\n'
)
VLLM_POST_INIT = "    def __post_init__(self):\n"
DP_WARNING_033 = (
    '            "Dynamic speculative decoding is not supported with data "\n'
    '            "parallelism because data-parallel ranks can select different "\n'
)


def _judge(tree: Path, *argv: str, file: str | None = None) -> Judgement:
    facts = SourceFacts.open(tree, check_served_tree)  # a fresh one per fork: nothing cached from another tree
    return evaluate(load(file, ["m", *argv] if argv else None, facts).config, load_catalogue(), facts)


def _codes(judgement: Judgement) -> set[str]:
    return {f.code for f in judgement.findings}


def _finding(judgement: Judgement, code: str) -> str:
    [message] = [f.message for f in judgement.findings if f.code == code]
    return message


@pytest.fixture
def new(tmp_path: Path, source_dir: Callable[[str], Path]) -> Path:
    return fork(source_dir("0.33.0"), tmp_path)


@pytest.fixture
def old(tmp_path: Path, source_dir: Callable[[str], Path]) -> Path:
    return fork(source_dir("0.28.0"), tmp_path)


# -- a validation reworded or moved ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wording",
    [
        'raise ValueError(f"DCP size {dcp} has to divide the tensor parallel size {tp}")',
        'raise RuntimeError("invalid parallel layout")',
        "raise NotImplementedError",  # no message at all
    ],
)
def test_a_reworded_check_is_found_by_what_it_does(new: Path, wording: str) -> None:
    check = DCP_CHECK_033.replace('raise ValueError(f"tp_size={tp} must be divisible by dcp_size={dcp}.")', wording)
    rewrite(new, "config/parallel.py", replace(DCP_CHECK_033, check))
    refused = _judge(new, "-tp", "2", "-dcp", "4")
    assert "CFG105" in _codes(refused), refused.not_judged
    assert "config/parallel.py:" in _finding(refused, "CFG105")
    assert any(n.startswith("CFG105: no statement saying") and "judged by meaning" in n for n in refused.notes)
    accepted = _judge(new, "-tp", "4", "-dcp", "2")
    assert "CFG105" not in _codes(accepted)
    # Judged by meaning, 0.33.0's DCP-needs-MLA check (config/model.py) depends on the model: said, not cleaned.
    assert "config/model.py" in accepted.not_judged["CFG105"]


def test_a_check_moved_to_another_module_is_found_there(new: Path) -> None:
    """Moved from ParallelConfig.__post_init__ to VllmConfig.__post_init__, written another way, reworded."""
    rewrite(new, "config/parallel.py", replace(DCP_CHECK_033, "            pass\n"))
    moved = (
        VLLM_POST_INIT
        + "        layout = self.parallel_config\n"
        + "        if layout.tensor_parallel_size % layout.decode_context_parallel_size:\n"
        + '            raise ValueError("DCP has to divide TP")\n'
    )
    rewrite(new, "config/vllm.py", replace(VLLM_POST_INIT, moved))
    judgement = _judge(new, "-tp", "2", "-dcp", "4")
    assert "CFG105" in _codes(judgement), judgement.not_judged
    assert "DCP has to divide TP" in _finding(judgement, "CFG105")
    assert "config/vllm.py:" in _finding(judgement, "CFG105")


def test_a_check_moved_out_of_reach_is_not_judged_naming_what_was_looked_for(new: Path) -> None:
    rewrite(new, "config/parallel.py", replace(DCP_CHECK_033, "            pass\n"))
    judgement = _judge(new, "-tp", "2", "-dcp", "4")
    assert "CFG105" not in _codes(judgement)
    why = judgement.not_judged["CFG105"]
    # The other catalogued statement (PCP on) is still there and not reached; the missing one is named, and
    # what the search by meaning found instead decides nothing.
    assert why.startswith('no statement saying "must be divisible by dcp_size" is in the served source'), why
    assert "judged by meaning" in why or "reading decode_context_parallel_size" in why


def test_a_reworded_pcp_refusal_on_an_older_release(old: Path) -> None:
    reworded = PCP_DP_028.replace("PCP does not support data parallelism yet.", "no PCP with DP, sorry")
    rewrite(old, "config/parallel.py", replace(PCP_DP_028, reworded))
    judgement = _judge(old, "-pcp", "2", "-dp", "2")
    assert "no PCP with DP, sorry" in _finding(judgement, "CFG113")


def test_a_reworded_warning_is_found_by_what_it_does(new: Path) -> None:
    rewrite(
        new,
        "config/vllm.py",
        replace(
            DP_WARNING_033,
            '            "Per-batch draft lengths are off with DP: "\n            "the ranks might diverge. "\n',
        ),
    )
    spec = {
        "method": "eagle3",
        "model": "d",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 2]],
    }
    judgement = _judge(new, "-dp", "2", "-sc", json.dumps(spec))
    assert "CFG109" in _codes(judgement) or "CFG109" in judgement.not_judged
    assert "CFG109" not in _codes(_judge(new, "-sc", json.dumps(spec)))


# -- try/except around a check -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("handler", "refused"), [("ValueError", False), ("Exception", False), ("KeyError", True)])
def test_a_check_inside_try_except(new: Path, handler: str, refused: bool) -> None:
    wrapped = (
        "            try:\n"
        + "".join("    " + line + "\n" for line in DCP_CHECK_033.splitlines())
        + f"            except {handler}:\n"
        + '                logger.warning("odd layout, going on")\n'
    )
    rewrite(new, "config/parallel.py", replace(DCP_CHECK_033, wrapped))
    judgement = _judge(new, "-tp", "2", "-dcp", "4")
    assert ("CFG105" in _codes(judgement)) is refused
    assert "CFG105" not in judgement.not_judged


# -- try/except in the caller of a check ------------------------------------------------------------------------

DRAFT_TP = "self.draft_tensor_parallel_size = ("  # SpeculativeConfig.__post_init__ calls _verify_and_get_draft_tp
DRAFT_TP_CONFIG = json.dumps(
    {"method": "eagle3", "model": "d", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}
)


@pytest.mark.parametrize("release", ["0.28.0", "0.33.0"])
@pytest.mark.parametrize(
    ("handler", "body", "refused"),
    [
        ("ValueError", ['logger.warning("draft TP not verified, going on")'], False),
        ("(TypeError, ValueError)", ["pass"], False),
        ("Exception as exc", ['logger.warning("odd draft TP: %s", exc)'], False),
        ("ValueError", ['logger.warning("draft TP not verified")', "raise"], True),
        ("ValueError as exc", ['raise RuntimeError("bad draft TP") from exc'], True),
        ("KeyError", ['logger.warning("never raised here")'], True),
    ],
    ids=["warns", "tuple", "exception", "re-raises", "raises-another", "catches-another-type"],
)
def test_a_try_in_the_caller_of_a_check(
    release: str, handler: str, body: list[str], refused: bool, tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """`_verify_and_get_draft_tp` raises; it is judged from its caller, `SpeculativeConfig.__post_init__`, which
    here calls it inside a try: what the caller's handler does decides."""
    tree = fork(source_dir(release), tmp_path)
    rewrite(tree, "config/speculative.py", wrap_in_try(DRAFT_TP, handler, body))
    judgement = _judge(tree, "-tp", "4", "-sc", DRAFT_TP_CONFIG)
    assert ("CFG107" in _codes(judgement)) is refused, judgement.not_judged
    assert "CFG107" not in judgement.not_judged
    if refused:  # the check's own text and place, whatever the caller raises instead
        assert "other value than 1 or target model tensor_parallel_size" in _finding(judgement, "CFG107")
        assert "config/speculative.py:" in _finding(judgement, "CFG107")


@pytest.mark.parametrize(("handler", "refused"), [("ValueError", False), ("KeyError", True)])
def test_a_try_two_callers_up(old: Path, handler: str, refused: bool) -> None:
    """The check's caller is a helper method; the helper's caller wraps the call in the try."""

    def change(text: str) -> str:
        text = through_method(DRAFT_TP, "_checked_draft_tp")(text)
        return wrap_in_try("self.draft_tensor_parallel_size = self._checked_draft_tp()", handler, ["pass"])(text)

    rewrite(old, "config/speculative.py", change)
    judgement = _judge(old, "-tp", "4", "-sc", DRAFT_TP_CONFIG)
    assert ("CFG107" in _codes(judgement)) is refused, judgement.not_judged
    assert "CFG107" not in judgement.not_judged


# -- the speculator registry written another way ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # The method through a local variable.
        (
            '    if speculative_config.method == "dflash":\n',
            '    method = speculative_config.method\n    if method == "dflash":\n',
        ),
        # A membership test instead of ==.
        ('    if speculative_config.method == "dflash":\n', '    if speculative_config.method in ("dflash",):\n'),
        # A predicate defined in the registry module.
        (
            '    if speculative_config.method == "dflash":\n',
            "    if _is_dflash(speculative_config):\n",
        ),
    ],
    ids=["local", "membership", "helper-predicate"],
)
def test_the_registry_is_evaluated_however_its_tests_are_written(old: Path, before: str, after: str) -> None:
    def change(text: str) -> str:
        text = replace(before, after)(text)
        if "_is_dflash" in after:
            text += '\n\ndef _is_dflash(cfg):\n    return cfg.method.lower() == "dflash"\n'
        return text

    rewrite(old, "v1/worker/gpu/spec_decode/__init__.py", change)
    spec = json.dumps({"method": "dflash", "model": "d", "num_speculative_tokens": 3})
    judgement = _judge(old, "-dp", "2", "-sc", spec)
    assert "CFG101" in _codes(judgement), judgement.not_judged
    assert "DFlashSpeculator" in _finding(judgement, "CFG101")


def test_a_registry_the_source_does_not_have_is_not_judged(old: Path) -> None:
    rewrite(old, "v1/worker/gpu/spec_decode/__init__.py", replace("def init_speculator(", "def build_speculator("))
    spec = json.dumps({"method": "dflash", "model": "d", "num_speculative_tokens": 3})
    judgement = _judge(old, "-dp", "2", "-sc", spec)
    assert "CFG101" not in _codes(judgement)
    assert "`init_speculator` in v1/worker/gpu/spec_decode/__init__.py" in judgement.not_judged["CFG101"]


def test_an_accepted_values_alias_the_source_does_not_define_is_not_judged(new: Path) -> None:
    rewrite(new, "config/speculative.py", lambda text: text.replace("SpeculativeMethod", "DraftMethod"))
    spec = json.dumps({"method": "medusa", "model": "d", "num_speculative_tokens": 3})
    judgement = _judge(new, "-sc", spec)
    assert "CFG106" not in _codes(judgement)
    assert "`SpeculativeMethod` in config/speculative.py" in judgement.not_judged["CFG106"]


# -- an option given only as a YAML dotted key -------------------------------------------------------------------


def test_an_option_only_in_a_yaml_dotted_key(old: Path, tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(
        "model: m\ndata-parallel-size: 2\nspeculative-config.method: dflash\nspeculative-config.model: d\n"
        "speculative-config.num_speculative_tokens: 3\n"
    )
    method = '    if speculative_config.method == "dflash":\n'
    rewrite(
        old,
        "v1/worker/gpu/spec_decode/__init__.py",
        replace(method, '    m = speculative_config.method\n    if m == "dflash":\n'),
    )
    judgement = _judge(old, file=str(config))
    assert "CFG101" in _codes(judgement), judgement.not_judged


# -- a module the evidence leads to cannot be read ------------------------------------------------------------------

BUILDER_MODULE = "v1/attention/backends/mla/flashinfer_mla.py"
DSPARK_DCP = Path(__file__).resolve().parents[2] / "examples" / "configs" / "dspark-dcp.yaml"


def _turn_into(tree: Path, relpath: str, kind: str) -> None:
    path = tree / relpath
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-out":
        path.symlink_to("/dev/zero")
    elif kind == "syntax-error":
        path.write_text("class Broken(:\n")


@pytest.mark.parametrize("kind", ["missing", "fifo", "link-out", "syntax-error"])
def test_a_hazard_whose_evidence_module_cannot_be_read_is_not_judged_naming_it(new: Path, kind: str) -> None:
    """CFG102 reads FlashInfer MLA's metadata builder, which the registry names by a dotted string: a tree whose
    builder module is gone (or a FIFO, a link out, a syntax error) must not pass for one whose builder accepts the
    config."""
    clean = _judge(new, file=str(DSPARK_DCP))
    assert {"CFG102", "CFG104"} <= _codes(clean) and not clean.not_judged, clean.not_judged
    _turn_into(new, BUILDER_MODULE, kind)
    judgement = _judge(new, file=str(DSPARK_DCP))
    assert "CFG104" in _codes(judgement)
    assert "CFG102" not in _codes(judgement)
    assert BUILDER_MODULE in judgement.not_judged["CFG102"], judgement.not_judged
