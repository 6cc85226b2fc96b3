"""Every fix proven by running vLLM's own code on the fixed file (issue #17).

`specguard check --fix` (and `--unsafe-fixes`) rewrites a copy of vLLM 0.28.0's source; tests/runtime/fix_probe.py
then runs vLLM 0.28.0's code, with the fixed modules in place of the installed ones, and reports what vLLM decided.
Each test also runs the unfixed file, so it shows the bug the fix removes, not just a passing run.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sg_runtime_helpers import REPO, old_vllm_path, run_in_venv

PROBE = Path(__file__).with_name("fix_probe.py")
KV = "v1/kv_cache_interface.py"
DFLASH = "v1/worker/gpu/spec_decode/dflash/speculator.py"
DECODE = "v1/worker/gpu/spec_decode/autoregressive/speculator.py"
MTP = "v1/worker/gpu/spec_decode/multi_module_mtp/speculator.py"


def _module(relative: str) -> str:
    return "vllm." + relative.removesuffix(".py").replace("/", ".")


def _run_probe(*args: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (old_vllm_path(), str(REPO), env.get("PYTHONPATH")) if p)
    proc = run_in_venv([str(PROBE), *args], env)
    (line,) = [row for row in proc.stdout.splitlines() if row.startswith("{")]
    return json.loads(line)


@functools.cache  # one interpreter per set of files: importing vLLM takes most of a probe's time
def _vllm(*files: str) -> dict:
    """What vLLM 0.28.0 decided in every scenario, with `files` (fixed vLLM files) in place of its own."""
    report = _run_probe("vllm", *(f"{_module(f.split('/vllm/', 1)[1])}={f}" for f in files))
    assert report.pop("loaded") == {_module(f.split("/vllm/", 1)[1]): f for f in files}  # it ran these files
    return report


def _merges(*paths: str) -> dict:
    return _run_probe("merges", *paths)


def _specguard(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it (the `cli` fixture's, usable from a module-scoped fixture)."""
    return subprocess.run(
        [sys.executable, "-m", "specguard", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def fixed_tree(tmp_path_factory, vllm_source) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """vLLM 0.28.0's source after `--fix` (safe fixes) and after `--fix --unsafe-fixes`."""
    trees = {}
    for name, flags in (("safe", ()), ("unsafe", ("--unsafe-fixes",))):
        root = tmp_path_factory.mktemp(name)
        shutil.copytree(vllm_source("0.28.0"), root / "vllm")
        out = _specguard(root, "check", "vllm", "--fix", "--no-cache", *flags)
        assert out.returncode == 1 and "fixed" in out.stdout, out.stdout + out.stderr
        trees[name] = root / "vllm"
    return trees


def _fixed(trees: dict[str, Path]) -> tuple[str, ...]:
    """The fixed files: the merge as plain `--fix` left it, the speculators as `--unsafe-fixes` did."""
    return (str(trees["safe"] / KV), *(str(trees["unsafe"] / f) for f in (DFLASH, DECODE, MTP)))


# ---- SG201: vLLM groups the layers of a fixed merge apart when they disagree --------------------------------


def test_sg201_plain_fix_lets_vllm_0_28_group_disagreeing_layers_apart(fixed_tree) -> None:  # type: ignore[no-untyped-def]
    before = _vllm()["sg201"]
    assert before["uniform_mixed"] is True  # the bug: a causal target and a non-causal draft layer are one spec
    assert before["groups_mixed"] == [[["target.0", "target.1", "draft.0"], True]]

    after = _vllm(*_fixed(fixed_tree))["sg201"]
    assert after["uniform_mixed"] is False and after["uniform_agreeing"] is True
    assert after["merged_agreeing"] == [False, True]  # agreeing layers merge with their flag, as before
    assert after["merge_error"].startswith("AssertionError: MLAAttentionSpec: all layers of one KV cache group must ")
    assert after["groups_agreeing"] == before["groups_agreeing"] == [[["draft.0", "draft.1"], True]]
    groups = after["groups_mixed"]
    assert [["draft.0"], True] in groups and all(flag is False for names, flag in groups if "draft.0" not in names)
    assert sorted(n for names, _ in groups for n in names) == ["draft.0", "target.0", "target.1"]


SHAPES = """
import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class AssertingSpec:  # vLLM's shape: asserts, then the reduction inside the constructor call
    block_size: int
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        assert len({s.block_size for s in specs}) == 1, "one block size per group"
        return cls(
            block_size=specs[0].block_size,
            non_causal_multi_token_decode=any(
                spec.non_causal_multi_token_decode for spec in specs
            ),
        )


@dataclass(frozen=True)
class RaisingSpec:  # checks that raise ValueError, the reduction through locals
    block_size: int
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        if len({s.block_size for s in specs}) != 1:
            raise ValueError("one block size per group")
        flags = [s.non_causal_multi_token_decode for s in specs]
        merged = all(flags)
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=merged)


@dataclass(frozen=True)
class ReplacingSpec:  # dataclasses.replace, no checks at all
    block_size: int = 16
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        return dataclasses.replace(
            specs[0], non_causal_multi_token_decode=max(s.non_causal_multi_token_decode for s in specs)
        )


@dataclass(frozen=True)
class KwargsSpec:  # a dict of fields unpacked into the constructor
    block_size: int = 16
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        fields = {"block_size": specs[0].block_size}
        fields["non_causal_multi_token_decode"] = min(set(s.non_causal_multi_token_decode for s in specs))
        return cls(**fields)


@dataclass(frozen=True)
class BranchSpec:  # the reduction on one branch only
    block_size: int = 16
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        if len(specs) == 1:
            return specs[0]
        else:
            flag = any([s.non_causal_multi_token_decode for s in specs])
        return cls(block_size=specs[0].block_size, non_causal_multi_token_decode=flag)
"""


def _rule_example(code: str) -> str:
    from specguard.rules import all_rules

    return textwrap.dedent(all_rules()[code].bad)


@pytest.mark.parametrize(
    ("name", "source", "classes"),
    [
        ("docs", lambda: _rule_example("SG201"), {"MLAAttentionSpec", "DraftAttentionSpec"}),
        ("shapes", lambda: SHAPES, {"AssertingSpec", "RaisingSpec", "ReplacingSpec", "KwargsSpec", "BranchSpec"}),
        ("examples", lambda: (REPO / "examples/myfork/kv_cache_interface.py").read_text(), {"MLAAttentionSpec"}),
    ],
)
def test_sg201_fixed_merges_of_every_shape_group_apart_under_vllm_0_28(name, source, classes, tmp_path, cli) -> None:  # type: ignore[no-untyped-def]
    """The rule's own examples, the examples tree and merge shapes of other forms, fixed by plain `--fix`: vLLM
    0.28.0's `is_kv_cache_spec_uniform` and grouping keep agreeing layers together, flag and all, and put a
    disagreeing layer apart; unfixed, every one merges a causal and a non-causal layer into one group."""
    original, fixed = tmp_path / "original.py", tmp_path / "fixed.py"
    original.write_text(source())
    fixed.write_text(source())
    out = cli("check", "fixed.py", "--fix", "--no-cache", "--select", "SG201", cwd=tmp_path)
    assert out.returncode == 0 and f"({len(classes)} fixed, 0 remaining)" in out.stdout, out.stdout + out.stderr
    reports = _merges(str(original), str(fixed))
    before, after = reports[str(original)], reports[str(fixed)]
    assert set(after) == set(before) == classes
    for cls in classes:
        assert before[cls]["uniform_mixed"] is True and len(before[cls]["groups_mixed"]) == 1, (cls, before[cls])
        got = after[cls]
        assert got["raised"] == "AssertionError" and got["uniform_mixed"] is False, (cls, got)
        assert got["uniform_agreeing"] is True and got["merged_agreeing"] == [False, True], (cls, got)
        assert [["draft.0"], True] in got["groups_mixed"], (cls, got)
        assert all(flag is False for names, flag in got["groups_mixed"] if "draft.0" not in names), (cls, got)


# ---- SG103: the fixed build is handed the count of the query it describes outside FULL graphs ---------------


def _counts(report: dict, key: str) -> list[tuple[int, int]]:
    return [(b["num_actual_tokens"], b["query_tokens"]) for b in report[key]["builds"]]


def test_sg103_fixed_dflash_propose_builds_with_its_query_count_outside_full_graphs(fixed_tree) -> None:  # type: ignore[no-untyped-def]
    """DFlash's step of the first seed: 12 requests x 4 tokens (48) on DP rank 0, the peer rank at 52."""
    before = _vllm()["dflash"]
    assert _counts(before, "PIECEWISE") == [(52, 48)]  # the seed's crash: 52 tokens for a 48-token query
    after = _vllm(*_fixed(fixed_tree))["dflash"]
    assert _counts(after, "PIECEWISE") == [(48, 48)] and after["PIECEWISE"]["drafted"] == [52]
    assert _counts(after, "NONE") == [(48, 48)]
    assert _counts(after, "FULL") == [(52, 48)] and after["FULL"]["replayed"] == [52]  # the captured padded shape


def test_sg103_fixed_autoregressive_decode_steps_build_one_token_per_request(fixed_tree) -> None:  # type: ignore[no-untyped-def]
    """The EAGLE-style decode steps: one token per request, 12 requests, a descriptor padded to 16. The fix
    takes the count from the call's own query (its request count), not any count the function can see."""
    before, after = _vllm()["decode"], _vllm(*_fixed(fixed_tree))["decode"]
    for step in ("_multi_step_decode", "_fused_multi_step_decode"):
        assert _counts(before, f"{step}:PIECEWISE") == [(16, 12)]
        assert _counts(after, f"{step}:PIECEWISE") == [(12, 12)]
        assert _counts(after, f"{step}:FULL") == [(16, 12)] and after[f"{step}:FULL"]["replayed"] == [16]


def test_sg103_fixed_mtp_propose_builds_with_its_mixed_query_count(fixed_tree) -> None:  # type: ignore[no-untyped-def]
    before, after = _vllm()["mtp"], _vllm(*_fixed(fixed_tree))["mtp"]
    real = after["real"]
    assert _counts(before, "PIECEWISE") == [(32, real)]
    assert _counts(after, "PIECEWISE") == [(real, real)] and _counts(after, "FULL") == [(32, real)]


def test_plain_fix_applies_only_the_safe_fix_and_unsafe_fixes_the_rest(fixed_tree, vllm_source) -> None:  # type: ignore[no-untyped-def]
    pristine = vllm_source("0.28.0")

    def changed(tree: Path) -> set[str]:
        return {
            str(p.relative_to(tree))
            for p in tree.rglob("*.py")
            if p.read_bytes() != (pristine / p.relative_to(tree)).read_bytes()
        }

    assert {name: changed(tree) for name, tree in fixed_tree.items()} == {
        "safe": {KV},
        "unsafe": {KV, DFLASH, DECODE, MTP},
    }


# ---- SG102 and SG104: no finding of theirs is fixable in vLLM's own tree, so a plugin's is ----------------

SG102_PLUGIN = """
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class PluginSpeculator(DraftModelSpeculator):
    def _build_draft_attn_metadata(
        self, num_reqs, num_reqs_padded, num_tokens_padded, seq_lens_cpu_upper_bound, step, **kwargs
    ):
        return super()._build_draft_attn_metadata(
            num_reqs, num_reqs_padded, num_tokens_padded, seq_lens_cpu_upper_bound, step, **kwargs
        )
"""

SG104_PLUGIN = """
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class PluginSpeculator(DraftModelSpeculator):
    def draft_step(self, num_reqs, batch_desc, query_start_loc_np, seq_lens_cpu_upper_bound):
        dcp_local_seq_lens = None
        if self.dcp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.dcp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens
        return self._build_attn_metadata(
            num_reqs,
            batch_desc,
            query_start_loc_np,
            seq_lens_cpu_upper_bound,
            step=1,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )
"""


def _plugin(tmp_path: Path, vllm_source, version: str, source: str, *flags: str) -> tuple[Path, Path, str]:  # type: ignore[no-untyped-def]
    """The plugin beside vLLM `version`'s source (so its base helper is read), and a copy fixed by `--fix`."""
    (tmp_path / "vllm").symlink_to(vllm_source(version))
    (tmp_path / "plugin").mkdir()
    original, fixed = tmp_path / "plugin" / "original.py", tmp_path / "plugin" / "fixed.py"
    original.write_text(source)
    fixed.write_text(source)
    out = _specguard(tmp_path, "check", "plugin/fixed.py", "--fix", "--no-cache", *flags)
    assert "(1 fixed, 0 remaining)" in out.stdout, out.stdout + out.stderr
    return original, fixed, fixed.read_text()


def test_sg102_safe_deletion_binds_every_call_alike_on_vllm_0_28s_helper(tmp_path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    """A pure forward whose parameters bind as the base helper's: plain `--fix` deletes it (safe), and every
    call reaches vLLM 0.28.0's helper with the same arguments, a call that failed still fails."""
    original, fixed, text = _plugin(tmp_path, vllm_source, "0.28.0", SG102_PLUGIN)
    assert "def _build_draft_attn_metadata" not in text
    report = _run_probe("plugin", "sg102", str(original), str(fixed))
    assert report["0"] == report["1"] and report["0"][-1] == "TypeError"
    assert report["0"][0] == [{"num_actual_tokens": 10, "query_tokens": 10}]


def test_sg104_unsafe_deletion_leaves_the_dcp_lengths_to_vllm_0_33s_helper(tmp_path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    """Under DCP the plugin prepared the lengths itself; after `--fix --unsafe-fixes` vLLM 0.33.0's helper, which
    recomputes them, prepares them from the same inputs and hands the builder the same lengths."""
    original, fixed, text = _plugin(tmp_path, vllm_source, "0.33.0", SG104_PLUGIN, "--unsafe-fixes")
    assert "prepare_dcp_local_seq_lens" not in text and "dcp_local_seq_lens=" not in text
    env = dict(os.environ, PYTHONPATH=str(REPO))  # the installed vLLM 0.33.0
    proc = run_in_venv([str(PROBE), "plugin", "sg104", str(original), str(fixed)], env)
    report = json.loads([row for row in proc.stdout.splitlines() if row.startswith("{")][0])
    (lengths,), prepared = report["0"]
    assert report["0"] == report["1"] and prepared == [[12, 2, 1, 1]] and len(lengths) == 12
