"""`specguard config` and `specguard doctor` end to end: examples, formats, exit codes, one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specguard.config_cli import doctor_main
from specguard.deploy.hazards import ENV_NOTE

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "configs"

# What each example must report on each source (docs/config.md shows these runs).
VERSIONS = ("0.28.0", "0.30.0", "0.33.0")
EXAMPLE_OUTCOMES = {
    ("dflash-dp2.yaml", "0.28.0"): {"CFG101"},
    ("dflash-dp2.yaml", "0.30.0"): set(),
    ("dflash-dp2.yaml", "0.33.0"): set(),
    ("dspark-dcp.yaml", "0.28.0"): {"CFG104", "CFG114"},
    ("dspark-dcp.yaml", "0.30.0"): {"CFG102", "CFG104"},
    ("dspark-dcp.yaml", "0.33.0"): {"CFG102", "CFG104"},
    ("dspark-dcp-triton.yaml", "0.28.0"): {"CFG104", "CFG114"},
    ("dspark-dcp-triton.yaml", "0.30.0"): {"CFG103", "CFG104"},
    ("dspark-dcp-triton.yaml", "0.33.0"): {"CFG103", "CFG104"},
    ("clean.yaml", "0.28.0"): set(),
    ("clean.yaml", "0.30.0"): set(),
    ("clean.yaml", "0.33.0"): set(),
}


@pytest.mark.parametrize(("example", "version"), sorted(EXAMPLE_OUTCOMES))
def test_examples_json(
    example: str,
    version: str,
    run_config: Callable[..., tuple[int, str, str]],
    source_dir: Callable[[str], Path],
) -> None:
    rc, out, err = run_config(str(EXAMPLES / example), "--vllm-source", str(source_dir(version)), "--format", "json")
    findings = json.loads(out)
    assert {f["code"] for f in findings} == EXAMPLE_OUTCOMES[(example, version)]
    assert rc == (1 if findings else 0)
    for f in findings:
        assert set(f) == {"code", "severity", "key", "value", "message", "fix"}
    # What was not judged goes to stderr: the Triton example's block size (left to the server), and on 0.28.0,
    # which has no DSpark DCP validation to find, CFG103. Besides, the run names the serving-environment
    # variables its verdicts read unset.
    expected = {"CFG110"} if example == "dspark-dcp-triton.yaml" else set()
    if example.startswith("dspark") and version == "0.28.0":
        expected.add("CFG103")
    env_note = f"specguard config: note: {ENV_NOTE}: "
    others = [line for line in err.splitlines() if not line.startswith(env_note) and "judged by meaning:" not in line]
    assert set(re.findall(r"(CFG\d{3}) not judged", "\n".join(others))) == expected, err


@pytest.mark.parametrize(
    ("argv", "plain", "strict"),
    [
        (["--", "m", "-pcp", "2", "-dp", "2"], 0, 3),  # CFG113 not judged on 0.33.0, nothing found
        (["--", "m", "-tp", "4", "-sc", '{"method": "eagle3", "model": "d", "draft_tensor_parallel_size": 2}'], 1, 1),
        (["--", "m", "-tp", "2", "--block-size", "16"], 0, 0),  # everything judged, nothing found
    ],
    ids=["not-judged", "found", "judged-clean"],
)
def test_strict_exit_codes(
    argv: list[str],
    plain: int,
    strict: int,
    run_config: Callable[..., tuple[int, str, str]],
    source_dir: Callable[[str], Path],
) -> None:
    src = ["--vllm-source", str(source_dir("0.33.0"))]
    rc, out, err = run_config(*src, *argv)
    assert rc == plain, out + err
    rc, out, err = run_config(*src, "--strict", *argv)
    assert rc == strict, out + err
    assert ("CFG113 not judged" in out) is (strict == 3)


def test_text_output(run_config: Callable[..., tuple[int, str, str]], source_dir: Callable[[str], Path]) -> None:
    path = EXAMPLES / "dflash-dp2.yaml"
    rc, out, _ = run_config(str(path), "--vllm-source", str(source_dir("0.28.0")))
    assert rc == 1
    assert f"{path}: judged against vLLM 0.28.0" in out
    assert f"{path}: data-parallel-size=2: CFG101 error" in out
    assert "fix: set data-parallel-size: 1" in out
    assert out.rstrip().endswith("1 hazard (1 error)")


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_argv_and_yaml_give_the_same_findings(
    version: str, run_config: Callable[..., tuple[int, str, str]], source_dir: Callable[[str], Path]
) -> None:
    src = str(source_dir(version))
    rc_yaml, out_yaml, _ = run_config(str(EXAMPLES / "dspark-dcp.yaml"), "--vllm-source", src, "--format", "json")
    rc_argv, out_argv, _ = run_config(
        "--vllm-source",
        src,
        "--format",
        "json",
        "--",
        "moonshotai/Kimi-K3",
        "-tp",
        "8",
        "-dcp",
        "8",
        "--cp-kv-cache-interleave-size",
        "16",
        "--block-size",
        "64",
        "--attention-backend",
        "FLASHINFER_MLA",
        "--speculative-config",
        '{"method": "dspark", "model": "moonshotai/Kimi-K3-DSpark", "num_speculative_tokens": 7, '
        '"attention_backend": "FLASHINFER_MLA"}',
        "--compilation-config",
        '{"cudagraph_mode": "FULL_AND_PIECEWISE"}',
    )
    assert rc_yaml == rc_argv == 1
    assert json.loads(out_yaml) == json.loads(out_argv)


def test_file_plus_arguments_override_the_file(
    run_config: Callable[..., tuple[int, str, str]], source_dir: Callable[[str], Path]
) -> None:
    rc, out, _ = run_config(
        str(EXAMPLES / "dflash-dp2.yaml"),
        "--vllm-source",
        str(source_dir("0.28.0")),
        "--format",
        "json",
        "--",
        "--data-parallel-size",
        "1",
    )
    assert (rc, json.loads(out)) == (0, [])


def test_without_a_source_says_how_many_hazards_went_unjudged(
    run_config: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import specguard.deploy.facts as facts_module

    monkeypatch.setattr(facts_module, "installed_vllm_dir", lambda: None)
    rc, out, _ = run_config(str(EXAMPLES / "dflash-dp2.yaml"))
    assert rc == 0
    assert "no vLLM source (pass --vllm-source DIR or install vllm): 18 of 18 hazards not judged" in out
    assert "--require-source makes this an error" in out
    assert out.rstrip().endswith("no hazard judged: no vLLM source")
    rc, out, err = run_config(str(EXAMPLES / "dflash-dp2.yaml"), "--format", "json")
    assert (rc, json.loads(out)) == (0, [])
    assert "18 of 18 hazards not judged" in err


def test_require_source_fails_a_blind_gate(
    run_config: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import specguard.deploy.facts as facts_module

    monkeypatch.setattr(facts_module, "installed_vllm_dir", lambda: None)
    rc, out, err = run_config(str(EXAMPLES / "dflash-dp2.yaml"), "--require-source")
    assert (rc, out) == (2, "")
    assert err.count("\n") == 1
    assert "no vLLM source found" in err and "all 18 hazards would go unjudged" in err


def test_require_source_with_a_source_judges(
    run_config: Callable[..., tuple[int, str, str]], source_dir: Callable[[str], Path]
) -> None:
    rc, out, _ = run_config(
        str(EXAMPLES / "dflash-dp2.yaml"), "--require-source", "--vllm-source", str(source_dir("0.28.0"))
    )
    assert rc == 1 and "CFG101 error" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["nope.yaml"], "nope.yaml: no such file"),
        ([], "give a config FILE.yaml"),
        (["--format", "xml", "x.yaml"], "argument --format: invalid choice"),
        (
            ["{examples}/clean.yaml", "--vllm-source", "/nonexistent/vllm"],
            "--vllm-source /nonexistent/vllm: not a",
        ),
        (["{examples}/clean.yaml", "--vllm-source", "{examples}"], "not a vllm package directory"),
        (
            ["--", "m", "--data-paralel-size", "2"],
            "unknown option '--data-paralel-size'; did you mean '--data-parallel-size'?",
        ),
        (["--", "m", "--data-parallel-size", "two"], "--data-parallel-size/-dp: expected an integer, got 'two'"),
        (["--", "m", "--speculative-config", "{oops"], "--speculative-config/-sc: expected a JSON value"),
        (["--", "m", "n"], "unrecognized arguments: n"),
        (["--", "--config"], "--config needs a file"),
        (["--", "m", "-cc", '{"cudagraph_mode": "auto"}'], "'AUTO' is not a member of CUDAGraphMode"),
        (["{examples}/clean.yaml", "--hazards", "/nonexistent.toml"], "hazard catalogue not found"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    argv: list[str], expected: str, run_config: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    rc, out, err = run_config(*[a.replace("{examples}", str(EXAMPLES)) for a in argv])
    assert rc == 2
    assert out == ""
    assert err.startswith("specguard: error: ")
    assert err.count("\n") == 1, err
    assert expected in err


@pytest.mark.parametrize(("text", "expected"), [("a: [1\n", "invalid YAML"), ("- 1\n", "got a YAML list")])
def test_bad_yaml_files(
    text: str, expected: str, tmp_path: Path, run_config: Callable[..., tuple[int, str, str]]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc, _, err = run_config(str(path))
    assert rc == 2 and expected in err and "Traceback" not in err


def test_as_a_separate_process_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("model: m\ndata-parallel-size: two\n")
    code = "import sys; from specguard.config_cli import config_main; sys.exit(config_main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    expected = f"specguard: error: {path}: argument --data-parallel-size/-dp: expected an integer, got 'two'\n"
    assert proc.stderr == expected


def test_help_exits_0(run_config: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = run_config("--help")
    assert rc == 0 and "--vllm-source" in out


def test_docs_example_table_matches_the_tested_outcomes() -> None:
    doc = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    for (example, version), codes in EXAMPLE_OUTCOMES.items():
        row = re.search(rf"^\| `{re.escape(example)}` \| (.*?) \| (.*?) \| (.*?) \|$", doc, flags=re.MULTILINE)
        assert row is not None, example
        cell = row.group(VERSIONS.index(version) + 1)
        assert set(re.findall(r"CFG\d{3}", cell)) == codes, (example, version, cell)


# -- doctor ---------------------------------------------------------------------------------------------------


@pytest.fixture
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the runtime-guard probe (a child that imports vLLM) where a test is about something else."""
    import specguard.deploy.doctor as doctor

    monkeypatch.setattr(doctor, "_runtime_checks", lambda: ([], "not probed in this test"))


def test_doctor_reports_versions_and_a_check_summary(
    capsys: pytest.CaptureFixture[str], source_dir: Callable[[str], Path], no_probe: None
) -> None:
    rc = doctor_main(["--vllm-source", str(source_dir("0.28.0")), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert set(report["packages"]) == {"vllm", "flashinfer", "torch"}
    assert report["check"]["findings"]["SG102"] >= 1
    assert report["check"]["findings"]["SG201"] >= 1
    assert report["vllm_dir"] == str(source_dir("0.28.0").resolve())


def test_doctor_text(capsys: pytest.CaptureFixture[str], source_dir: Callable[[str], Path], no_probe: None) -> None:
    rc = doctor_main(["--vllm-source", str(source_dir("0.33.0"))])
    out = capsys.readouterr().out
    assert rc == 0
    assert "specguard check: " in out and "SG102" not in out
    assert out.splitlines()[0].startswith("python ")


def test_doctor_lists_the_runtime_guard_checks_as_the_guard_installs_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_SPECGUARD", raising=False)
    assert doctor_main(["--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runtime_note"] == "VLLM_SPECGUARD unset: off"
    names = [c["name"] for c in report["runtime"]]
    # One entry per guard target the runtime knows (G1 wrappers, MLA backend, group merge, draft helper).
    for check in ("G1", "G3", "G4"):
        assert any(check in name for name in names), names
    for c in report["runtime"]:
        assert c["would_install"] or c["detail"], c


def test_doctor_reports_a_failed_probe(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import specguard.deploy.doctor as doctor

    monkeypatch.setattr(doctor, "_PROBE", "raise SystemExit('guard exploded')")
    monkeypatch.setenv("VLLM_SPECGUARD", "bogus")
    assert doctor_main([]) == 0
    out = capsys.readouterr().out
    assert "VLLM_SPECGUARD='bogus' is not a valid value" in out
    assert "probing which checks would install failed: guard exploded" in out


def test_doctor_without_vllm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_probe: None
) -> None:
    import specguard.deploy.doctor as doctor

    monkeypatch.setattr(doctor, "installed_vllm_dir", lambda: None)
    monkeypatch.setattr(doctor, "_version", lambda names: None)
    assert doctor_main([]) == 0
    out = capsys.readouterr().out
    assert "vllm        not installed" in out
    assert "specguard check: skipped" in out


def test_doctor_bad_source(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert doctor_main(["--vllm-source", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("specguard: error: --vllm-source")


def test_pyyaml_is_not_imported_until_a_yaml_file_is_read() -> None:
    code = (
        "import sys; import specguard.cli, specguard.config_cli, specguard.deploy.load, specguard.deploy.hazards; "
        "sys.exit('yaml' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
