"""Blind config set 1 (`tests/corpus/blind_config_r1`, issue 30): 69 serving configs written by someone who never
read specguard, each labelled with what vLLM's real code does (`hazard`, `refused` by vLLM itself, or `clean`),
on 0.28.0-0.33.0 and seven forks. Run with `--strict` as an operator's CI gate would: a hazard or a refusal
judged clean (exit 0) is a silent miss. The numbers are floors no change may fall below; RUNS.md has each run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.deploy.sg_mutate import fork, replace, rewrite

CASES = Path(__file__).resolve().parents[1] / "corpus" / "blind_config_r1" / "cases.json"


def test_no_hazard_is_judged_clean(run_config, source_dir, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outcomes: dict[str, list[str]] = {}
    for case in json.loads(CASES.read_text()):
        tree = source_dir(case["version"])
        if case["fork"]:
            tree = fork(tree, tmp_path / case["id"])
            for edit in case["fork"]:
                rewrite(tree, edit["file"], replace(edit["old"], edit["new"]))
        argv = ["--vllm-source", str(tree), "--strict"]
        argv += [f"--env={k}={v}" for k, v in case["env"].items()]
        if case["yaml"]:
            (tmp_path / f"{case['id']}.yaml").write_text(case["yaml"])
            argv.append(str(tmp_path / f"{case['id']}.yaml"))
        rc, out, err = run_config(*argv, "--", *case["argv"])
        assert "Traceback" not in out + err, case["id"]
        said = {0: "clean", 1: "hazard", 2: "error", 3: "not judged"}[rc]
        outcomes.setdefault(f"{case['expect']} -> {said}", []).append(case["id"])
    counts = {k: len(v) for k, v in outcomes.items()}
    assert "hazard -> clean" not in outcomes, outcomes  # the first run had 8
    assert counts.get("refused -> clean", 0) <= 4, outcomes  # refusals outside the catalogue (RUNS.md)
    assert counts.get("clean -> hazard", 0) <= 2, outcomes  # a CFG104 warning the author allows, a disputed fork
    assert counts.get("hazard -> hazard", 0) >= 21, outcomes
