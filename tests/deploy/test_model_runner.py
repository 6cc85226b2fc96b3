"""CFG101/CFG114 are judged for the model runner the served source picks (issue #19 item 5): the pick
(`VllmConfig.use_v2_model_runner`) is evaluated with the config and the serving environment, each runner's own
speculator registry is evaluated, and where an unset variable decides the verdict the verdict says so. The
environment note names only the variables that decided a branch of some verdict."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork, replace, rewrite

from specguard.composition import check_served_tree
from specguard.deploy.catalogue import load_catalogue
from specguard.deploy.facts import SourceFacts
from specguard.deploy.hazards import Judgement, evaluate
from specguard.deploy.load import load
from specguard.evaluation.environment import served_environment

RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
SELECTION = "`VllmConfig.use_v2_model_runner` (config/vllm.py)"


def _spec(method: str) -> list[str]:
    return ["-sc", json.dumps({"method": method, "model": "d", "num_speculative_tokens": 3})]


def _judge(facts: SourceFacts, argv: list[str], env: dict[str, str] | None = None) -> Judgement:
    with served_environment(env or {}):
        return evaluate(load(None, ["m", *argv], facts).config, load_catalogue(), facts)


def _message(judgement: Judgement, code: str) -> str:
    """A finding's message, up to what it assumed of the DP ranks (test_data_parallel_engine.py)."""
    [message] = [f.message for f in judgement.findings if f.code == code]
    return message.split(" Judged for DP ranks sharing batches")[0]


def _env_note(judgement: Judgement) -> str:
    return judgement.env_note() or ""


def test_an_unset_variable_and_an_undecided_pick_are_named_in_the_verdict(
    facts: Callable[[str], SourceFacts],
) -> None:
    # 0.28.0 runs DFlash on V2 unless the draft or the target model says otherwise (their architectures, MoE, ...).
    judgement = _judge(facts("0.28.0"), ["-dp", "2", *_spec("dflash")])
    message = _message(judgement, "CFG101")
    assert f"Judged for the V2 model runner, which {SELECTION} picks for this config with {RUNNER} unset" in message
    assert "depending on `self._dflash_needs_multi_kv_group()` (config/vllm.py:" in message
    assert message.endswith("the V1 model runner, picked otherwise, has not this hazard.")
    assert f"{RUNNER} (CFG101)" in _env_note(judgement)


@pytest.mark.parametrize(("value", "found"), [("1", True), ("0", False)])
def test_the_variable_set_picks_the_runner(value: str, found: bool, facts: Callable[[str], SourceFacts]) -> None:
    judgement = _judge(facts("0.28.0"), ["-dp", "2", *_spec("dflash")], {RUNNER: value})
    assert ("CFG101" in {f.code for f in judgement.findings}) is found
    assert "CFG101" not in judgement.not_judged
    if found:  # the deployment's own pick: nothing assumed
        assert "Judged for" not in _message(judgement, "CFG101")
    assert RUNNER not in _env_note(judgement)
    assert not [n for n in judgement.notes if n.startswith("CFG101:")]


def test_a_certain_pick_that_rests_on_an_unset_variable(facts: Callable[[str], SourceFacts]) -> None:
    # 0.28.0 forces V2 for DSpark, unless the variable says otherwise; V1 would run it with its EagleProposer.
    unset = _judge(facts("0.28.0"), ["-dp", "2", *_spec("dspark")])
    message = _message(unset, "CFG101")
    assert f"Judged for the V2 model runner, which {SELECTION} picks for this config with {RUNNER} unset;" in message
    assert "depending on" not in message
    assert "CFG101" not in {
        f.code for f in _judge(facts("0.28.0"), ["-dp", "2", *_spec("dspark")], {RUNNER: "0"}).findings
    }


def test_cfg114_is_judged_for_the_runner_too(facts: Callable[[str], SourceFacts]) -> None:
    argv = ["-tp", "2", "-dcp", "2", *_spec("eagle3")]
    assert "Judged for the V2 model runner" in _message(_judge(facts("0.28.0"), argv), "CFG114")
    assert "CFG114" not in {f.code for f in _judge(facts("0.28.0"), argv, {RUNNER: "0"}).findings}


def test_runners_that_agree_need_no_pick(facts: Callable[[str], SourceFacts]) -> None:
    # 0.33.0's speculators have no SG102/SG103 on either runner: the verdict does not depend on the variable.
    judgement = _judge(facts("0.33.0"), ["-dp", "2", *_spec("dflash")])
    assert "CFG101" not in {f.code for f in judgement.findings} and "CFG101" not in judgement.not_judged
    assert RUNNER not in _env_note(judgement)


# -- forks: the pick and the registries as the served source has them --------------------------------------------

USE_V2_028 = "        use_v2_model_runner = envs.VLLM_USE_V2_MODEL_RUNNER\n"


@pytest.fixture
def old(tmp_path: Path, source_dir: Callable[[str], Path]) -> Path:
    return fork(source_dir("0.28.0"), tmp_path)


@pytest.mark.parametrize(
    ("env", "found"), [({}, True), ({"FORK_MODEL_RUNNER": "v2"}, True), ({"FORK_MODEL_RUNNER": "v1"}, False)]
)
def test_a_fork_that_picks_the_runner_from_its_own_variable(old: Path, env: dict[str, str], found: bool) -> None:
    def change(text: str) -> str:
        text = replace(USE_V2_028, "        use_v2_model_runner = _runner_choice()\n")(text)
        return text + (
            "\n\ndef _runner_choice():\n"
            '    choice = os.environ.get("FORK_MODEL_RUNNER")\n'
            "    if choice is None:\n"
            "        return None\n"
            '    return choice == "v2"\n'
        )

    rewrite(old, "config/vllm.py", change)
    judgement = _judge(SourceFacts.open(old, check_served_tree), ["-dp", "2", *_spec("dflash")], env)
    assert ("CFG101" in {f.code for f in judgement.findings}) is found, judgement.not_judged
    if found:
        assert ("FORK_MODEL_RUNNER unset" in _message(judgement, "CFG101")) is (not env)
        assert RUNNER not in _message(judgement, "CFG101")  # this fork never reads it


def test_a_fork_that_always_runs_v1_is_judged_for_v1(old: Path) -> None:
    rewrite(old, "config/vllm.py", replace(USE_V2_028, "        return False\n"))
    judgement = _judge(SourceFacts.open(old, check_served_tree), ["-dp", "2", *_spec("dflash")])
    assert "CFG101" not in {f.code for f in judgement.findings} and "CFG101" not in judgement.not_judged
    assert not [n for n in judgement.notes if n.startswith("CFG101:")]  # certain, and no variable read: no note


def test_a_runner_registry_the_source_lacks_matters_only_where_that_runner_may_run(old: Path) -> None:
    rewrite(old, "v1/worker/gpu_model_runner.py", lambda text: text.replace("self.drafter", "self.proposer"))
    facts = SourceFacts.open(old, check_served_tree)
    unset = _judge(facts, ["-dp", "2", *_spec("dflash")])
    assert "CFG101" not in {f.code for f in unset.findings}
    assert (
        "`GPUModelRunner.__init__` in v1/worker/gpu_model_runner.py stores in `drafter`" in unset.not_judged["CFG101"]
    )
    # With the V2 model runner picked, what V1 would run does not matter.
    assert "CFG101" in {f.code for f in _judge(facts, ["-dp", "2", *_spec("dflash")], {RUNNER: "1"}).findings}


# -- the environment note -----------------------------------------------------------------------------------------

DCP_CHECK_033 = "            if tp % dcp != 0:\n"


def test_the_note_names_what_decided_a_branch_not_what_was_read(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    tree = fork(source_dir("0.33.0"), tmp_path)
    read_only = (
        '            layout_label = os.environ.get("FORK_LAYOUT_LABEL")\n'  # read, never tested
        '            strict = os.environ.get("FORK_STRICT_LAYOUT")\n'  # tested through a local
        "            if strict:\n"
        '                logger.info("strict layout")\n'
        '            if os.getenv("FORK_CHECK_DCP", "1") == "1":\n'  # tested directly
        "                pass\n"
    )
    rewrite(tree, "config/parallel.py", replace(DCP_CHECK_033, read_only + DCP_CHECK_033))
    facts = SourceFacts.open(tree, check_served_tree)
    note = _env_note(_judge(facts, ["-tp", "2", "-dcp", "4"]))
    assert "FORK_STRICT_LAYOUT (" in note and "FORK_CHECK_DCP (" in note
    assert "FORK_LAYOUT_LABEL" not in note
    # Set, a variable is the deployment's: no longer named.
    assert "FORK_STRICT_LAYOUT" not in _env_note(_judge(facts, ["-tp", "2", "-dcp", "4"], {"FORK_STRICT_LAYOUT": ""}))


# -- registries as later releases and forks write them -------------------------------------------------------------

DFLASH_029 = "        return DFlashSpeculator(vllm_config, device)\n"


@pytest.fixture
def v029(tmp_path: Path, source_dir: Callable[[str], Path]) -> Path:
    return fork(source_dir("0.29.0"), tmp_path)


def test_a_registry_naming_its_class_by_qualified_name_is_followed(v029: Path) -> None:
    # vLLM 0.34.0 resolves every speculator this way (`resolve_obj_by_qualname`): read, never imported.
    qualified = (
        '        return resolve_obj_by_qualname("vllm.v1.worker.gpu.spec_decode.dflash.speculator.DFlashSpeculator")(\n'
    )
    rewrite(
        v029,
        "v1/worker/gpu/spec_decode/__init__.py",
        lambda text: (
            "from vllm.utils.import_utils import resolve_obj_by_qualname\n"
            + replace(DFLASH_029, qualified + "            vllm_config, device\n        )\n")(text)
        ),
    )
    judgement = _judge(SourceFacts.open(v029, check_served_tree), ["-dp", "2", *_spec("dflash")], {RUNNER: "1"})
    assert "CFG101" in {f.code for f in judgement.findings}, judgement.not_judged


def test_a_registry_that_builds_no_class_of_the_source_is_not_judged(v029: Path) -> None:
    dspark = "        return DSparkSpeculator(vllm_config, device)\n"
    rewrite(v029, "v1/worker/gpu/spec_decode/__init__.py", replace(dspark, "        return load_plugin(vllm_config)\n"))
    judgement = _judge(SourceFacts.open(v029, check_served_tree), ["-dp", "2", *_spec("dspark")], {RUNNER: "1"})
    assert "CFG101" not in {f.code for f in judgement.findings}
    assert (
        "`init_speculator` in v1/worker/gpu/spec_decode/__init__.py, which builds none of the source's classes"
        in (judgement.not_judged["CFG101"])
    )


def test_a_source_with_one_model_runner_and_no_selection_is_judged_for_it(v029: Path) -> None:
    # vLLM 0.34.0 has only the V2 model runner: no `use_v2_model_runner`, no `GPUModelRunner`.
    (v029 / "v1/worker/gpu_model_runner.py").unlink()
    rewrite(v029, "config/vllm.py", replace("    def use_v2_model_runner(self)", "    def _gone(self)"))
    judgement = _judge(SourceFacts.open(v029, check_served_tree), ["-dp", "2", *_spec("dflash")])
    assert "CFG101" in {f.code for f in judgement.findings}, judgement.not_judged
    assert "model runner" not in _message(judgement, "CFG101")
