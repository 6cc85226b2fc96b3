"""Environment values read as the served vLLM reads them (issue 30, CFG116): each variable of the serving
environment that the served `envs.py` declares is parsed by that file's own code, evaluated; a value it refuses
(`VLLM_USE_V2_MODEL_RUNNER=false`: `bool(int("false"))` raises `ValueError` at engine creation) is an error that
names the variable and the value first. Before, 0.31.0 called that config clean."""

from __future__ import annotations

import json

import pytest

SPEC = json.dumps({"method": "dflash", "model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 15})


@pytest.mark.parametrize("version", ["0.29.0", "0.31.0", "0.33.0"])
@pytest.mark.parametrize("value", ["false", "true", ""])
def test_a_value_the_served_parser_refuses_is_an_error(run_config, source_dir, version: str, value: str) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run_config(
        "--vllm-source", str(source_dir(version)), f"--env=VLLM_USE_V2_MODEL_RUNNER={value}", "--", "m", "-sc", SPEC
    )
    assert rc == 1, out
    verdict = f": VLLM_USE_V2_MODEL_RUNNER={value}: CFG116 error\n"
    assert f"{verdict}  VLLM_USE_V2_MODEL_RUNNER={value!r} in the serving" in out
    assert f"int({value!r}) raises ValueError" in out and "envs.py:" in out


@pytest.mark.parametrize("value", ["0", "1", " 0"])
def test_a_value_it_accepts_is_not(run_config, source_dir, value: str) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run_config(
        "--vllm-source", str(source_dir("0.31.0")), f"--env=VLLM_USE_V2_MODEL_RUNNER={value}", "--", "m", "-sc", SPEC
    )
    assert "CFG116" not in out, out


def test_a_variable_the_source_does_not_declare_is_not_parsed(run_config, source_dir) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run_config("--vllm-source", str(source_dir("0.31.0")), "--env=VLLM_NOT_A_SETTING=false", "--", "m")
    assert (rc, "CFG116" in out) == (0, False), out


@pytest.mark.parametrize(("value", "refused"), [("forkserver", True), ("Spawn", True), ("spawn", False)])
def test_a_value_outside_the_choices_the_served_source_lists_is_an_error(  # type: ignore[no-untyped-def]
    run_config, source_dir, value: str, refused: bool
) -> None:
    """Blind config set 2: `env_with_choices(...)` checks the value against its list (case-sensitive here) when the
    variable is read; the evaluator follows it (`callable(choices)` of a list is False) to the raise."""
    rc, out, _ = run_config(
        "--vllm-source", str(source_dir("0.32.0")), f"--env=VLLM_WORKER_MULTIPROC_METHOD={value}", "--", "m"
    )
    assert (f"VLLM_WORKER_MULTIPROC_METHOD={value}: CFG116 error" in out) == refused, out
    assert rc == (1 if refused else 0), out


@pytest.mark.parametrize(("value", "refused"), [("0", True), ("false", True), ("1", False)])
def test_the_served_sources_own_environment_validation_is_evaluated(  # type: ignore[no-untyped-def]
    run_config, source_dir, value: str, refused: bool
) -> None:
    """Blind config set 5: 0.34.0 no longer declares VLLM_USE_V2_MODEL_RUNNER, and `Platform.validate_environ`
    refuses any value but `1` at engine creation; `envs.py`'s parsing alone called `=0` clean."""
    rc, out, _ = run_config(
        "--vllm-source", str(source_dir("0.34.0")), f"--env=VLLM_USE_V2_MODEL_RUNNER={value}", "--", "m", "-sc", SPEC
    )
    assert (f": VLLM_USE_V2_MODEL_RUNNER={value}: CFG116 error\n" in out) == refused, out
    if refused:
        assert "is no longer supported: Model Runner V1 has been removed" in out and "platforms/interface.py:" in out


@pytest.mark.parametrize("version", ["0.29.0", "0.33.0"])
def test_an_unknown_variable_is_refused_only_where_the_config_asks_for_it(run_config, source_dir, version: str) -> None:  # type: ignore[no-untyped-def]
    argv = ["--vllm-source", str(source_dir(version)), "--env=VLLM_NOT_A_SETTING=1", "--", "m"]
    rc, out, _ = run_config(*argv)
    assert (rc, "CFG116" in out) == (0, False), out
    rc, out, _ = run_config(*argv, "--fail-on-environ-validation")
    assert rc == 1 and "VLLM_NOT_A_SETTING=1: CFG116 error" in out and "Unknown vLLM environment variable" in out, out
