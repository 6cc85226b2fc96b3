"""The speculative method `specguard config` judges a config for, against the one vLLM's own `SpeculativeConfig`
arrives at (issue 30: the seed bug was silent where vLLM infers `dflash` from the draft model's name). On 0.29.0,
0.31.0 and 0.33.0, each case (tests/deploy/data/method_cases.json) is run through the release's real code on a tiny
local draft model (tests/deploy/data/method_reference.py, in a subprocess with that release's code first on the
path), and through `specguard config`'s derivation on the same release's source. They must agree wherever specguard
decides; where it does not, it says the method depends on the draft model's own config, which it never reads, and
the methods it judges each hazard for instead include vLLM's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specguard.deploy.derived import served_method
from specguard.deploy.facts import SourceFacts
from specguard.deploy.load import load

DATA = Path(__file__).resolve().parent / "data"
CASES = json.loads((DATA / "method_cases.json").read_text())


def _package_parent(source: Path) -> Path:
    return source.parent if (source / "__init__.py").is_file() else source


def _vllm_methods(source: Path, models: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(_package_parent(source)), "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(DATA / "method_reference.py"), str(models)],
        input=json.dumps(CASES),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(answer["file"]).resolve().is_relative_to(_package_parent(source).resolve()), answer["file"]
    return answer["methods"]


@pytest.mark.parametrize("version", ["0.29.0", "0.31.0", "0.33.0"])
def test_the_method_is_the_one_vllm_arrives_at(
    source_dir: Callable[[str], Path], facts: Callable[[str], SourceFacts], version: str, tmp_path: Path
) -> None:
    vllm = _vllm_methods(source_dir(version), tmp_path)
    agreed, undecided = [], []
    for case in CASES:
        expected = vllm[case["id"]]
        if expected.startswith("error"):
            continue  # vLLM refuses the draft itself (its architecture): nothing to compare
        spec = dict(case["spec"])
        if case["draft"]:
            spec["model"] = str(tmp_path / case["draft"][0])
        loaded = load(None, [str(tmp_path / "Qwen/Qwen3-8B"), "--speculative-config", json.dumps(spec)], facts(version))
        served = served_method(loaded.config, facts(version))
        if served.undecided:
            assert "draft" in served.undecided, (case["id"], served.undecided)
            # the methods each hazard is then judged for include the one vLLM arrives at
            assert not served.candidates or expected in served.candidates, (case["id"], served)
            undecided.append(case["id"])
            continue
        assert served.method == expected, (case["id"], served)
        agreed.append(case["id"])
    # The name-inferred spellings of the seed bug are decided, not left to the draft's config. A name with no
    # DFlash marker is not: the source tests the draft's architectures for DFlash first (a DSpark-named draft may be
    # a DFlash one), and specguard never reads the draft's config.json.
    assert {"dflash-by-name", "dflash-draft-model", "dflash-mtp", "eagle3-by-name"} <= set(agreed), (agreed, undecided)
    assert set(undecided) <= {"dspark-by-name", "plain-draft"}, undecided
