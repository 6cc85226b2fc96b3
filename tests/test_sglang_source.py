"""`specguard check` on SGLang 0.5.23's real source (issues 27 and 29): the whole tree is found and read, the PEP
420 namespace portion inside a regular package (`sglang/multimodal_gen/runtime/` has no `__init__.py`) included,
with no "cannot locate" note and no internal error; and the findings are exactly the ones written below from
reading the code. (The note's condition, a subclass naming a pack name under an unlocated ancestor, is met nowhere
in SGLang even where a module were not located: `tests/test_resolution.py` pins how a namespace portion's modules
are named and located.)"""

from __future__ import annotations

import json

from tests.conftest import run_cli, unpacked

# SG106 on 0.5.23, each read in the code (sgl-project/sglang#38580 quotes the first two): the EAGLE draft path plans
# the real batch and marks it ready, and `ModelRunner.forward` pads it for DP attention without planning again.
SG106_0_5_23 = {
    # EagleDraftWorker.draft: `init_forward_metadata` at 711, `mark_forward_metadata_ready()` at 712
    ("sglang/srt/speculative/eagle_worker_v2.py", 714),
    # EagleDraftWorker._draft_extend_for_decode: planned and marked in eagle_worker_common.prepare_for_draft_extend
    ("sglang/srt/speculative/eagle_worker_v2.py", 1211),
    # the attention unit-test kit's eager draft runner, which mirrors the production path ("mirror production:
    # pre-plan marks") with a batch the rule cannot tell is never synchronised across DP ranks
    ("sglang/test/kits/attention_unittest/runner_modes/speculative_draft_runner.py", 428),
}
# Listed as not decided: the multi-layer EAGLE worker's draft extend, whose paths through its helpers' tests are more
# than the evaluation follows one by one (its own tests alone leave the readiness mark joined); and the Dots hybrid
# attention backend's `forward`, which re-plans after DP padding and hands an unannotated batch on to another
# backend's `forward` (whose class, and so whose predicate, the evaluation cannot tell).
UNDECIDED_0_5_23 = {
    "sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
    "sglang/srt/layers/attention/dots_hybrid_backend.py",
}


def test_sglang_0_5_23_is_read_whole_without_a_note() -> None:
    tree = unpacked("sglang", "0.5.23")
    assert not (tree / "multimodal_gen" / "runtime" / "__init__.py").exists()  # the namespace portion is there
    assert (tree / "multimodal_gen" / "__init__.py").exists()
    out = run_cli("check", "sglang", "--no-cache", "--show-files", cwd=tree.parent)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    assert len(out.stdout.splitlines()) == len(list(tree.rglob("*.py")))


def test_sglang_0_5_23_findings_are_the_live_eagle_instances() -> None:
    tree = unpacked("sglang", "0.5.23")
    out = run_cli("check", "sglang", "--no-cache", "--format", "json", "-v", cwd=tree.parent)
    assert out.returncode == 1, out.stderr
    found = {(_in_tree(f["filename"]), f["location"]["row"], f["code"]) for f in json.loads(out.stdout)}
    assert found == {(path, row, "SG106") for path, row in SG106_0_5_23}
    said = [line.split("not decided: ", 1)[1] for line in out.stderr.splitlines() if "not decided: " in line]
    assert {_in_tree(line.split(":", 1)[0]) for line in said} == UNDECIDED_0_5_23, out.stderr
    assert "internal error" not in out.stderr and "cannot locate" not in out.stderr


def _in_tree(path: str) -> str:
    """A reported path from the package folder on (`sglang/srt/...`), however the run wrote it."""
    return path if path.startswith("sglang/") else "sglang/" + path.split("/sglang/", 1)[1]
