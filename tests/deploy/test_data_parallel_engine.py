"""CFG101/CFG117 are judged where the DP ranks share batches (blind config set 4): vLLM's engine core runs the
ranks of a target that is not MoE as independent engines with DP 1 (`EngineCoreProc.run_engine_core`), so no DP
padding reaches their speculators. Which engine the served source builds is evaluated with the config; where it
rests on what the pre-flight cannot read (the checkpoint's experts), the verdict says what it assumed."""

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

ENGINE = "`EngineCoreProc.run_engine_core` (v1/engine/core.py)"
MOE_TEST_029 = "        if data_parallel and vllm_config.model_config.is_moe:\n"


def _judge(facts: SourceFacts, method: str, *argv: str) -> Judgement:
    spec = ["-sc", json.dumps({"method": method, "model": "d", "num_speculative_tokens": 3})]
    with served_environment({"VLLM_USE_V2_MODEL_RUNNER": "1"}):
        return evaluate(load(None, ["m", "-dp", "2", *spec, *argv], facts).config, load_catalogue(), facts)


def _messages(judgement: Judgement, code: str) -> list[str]:
    return [f.message for f in judgement.findings if f.code == code]


@pytest.mark.parametrize(
    ("version", "method", "code"), [("0.29.0", "dflash", "CFG101"), ("0.27.0", "eagle3", "CFG117")]
)
def test_a_verdict_that_rests_on_the_target_being_moe_says_so(
    version: str, method: str, code: str, facts: Callable[[str], SourceFacts]
) -> None:
    [message] = _messages(_judge(facts(version), method), code)
    assert f"Judged for DP ranks sharing batches (DPEngineCoreProc), which {ENGINE} builds depending on" in message
    assert "vllm_config.model_config.is_moe` (v1/engine/core.py:" in message
    assert message.endswith("EngineCoreProc, built otherwise, runs each DP rank alone and has not this hazard.")


@pytest.fixture
def old(tmp_path: Path, source_dir: Callable[[str], Path]) -> Path:
    return fork(source_dir("0.29.0"), tmp_path)


def test_a_fork_that_always_coordinates_its_dp_ranks_needs_no_assumption(old: Path) -> None:
    rewrite(old, "v1/engine/core.py", replace(MOE_TEST_029, "        if data_parallel:\n"))
    [message] = _messages(_judge(SourceFacts.open(old, check_served_tree), "dflash"), "CFG101")
    assert "sharing batches" not in message


@pytest.mark.parametrize(("argv", "found"), [((), False), (("--enable-expert-parallel",), True)])
def test_a_fork_that_coordinates_dp_ranks_only_under_expert_parallelism(
    old: Path, argv: tuple[str, ...], found: bool
) -> None:
    condition = "        if data_parallel and vllm_config.parallel_config.enable_expert_parallel:\n"
    rewrite(old, "v1/engine/core.py", replace(MOE_TEST_029, condition))
    judgement = _judge(SourceFacts.open(old, check_served_tree), "dflash", *argv)
    assert bool(_messages(judgement, "CFG101")) is found
    assert "CFG101" not in judgement.not_judged
    if found:
        assert "sharing batches" not in _messages(judgement, "CFG101")[0]
    else:
        [note] = [n for n in judgement.notes if n.startswith("CFG101:")]
        assert f"no hazard for data-parallel-size=2: {ENGINE} runs each DP rank as its own engine" in note
