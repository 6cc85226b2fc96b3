"""Fixes on the real vLLM trees (the wheels' sources, copied: the cached ones are never written)."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specguard.composition import check_paths

DFLASH = "v1/worker/gpu/spec_decode/dflash/speculator.py"


def test_dflash_override_in_0_28_0_keeps_its_finding_and_says_why_no_fix(vllm_source) -> None:  # type: ignore[no-untyped-def]
    """It returns early when there are no draft layers and passes `self.num_query_per_req` instead of its own
    parameter: deleting it would change what runs, so the upstream fix needed a person."""
    result = check_paths([vllm_source("0.28.0") / DFLASH], use_cache=False)
    (finding,) = [f for f in result.findings if f.code == "SG102"]
    assert finding.fix is None
    assert finding.message.endswith(
        "; no fix offered: the override is not a pure forward (it also runs an `if` that returns early and "
        "asserts; it passes `self.num_query_per_req` for `num_query_per_req`)"
    )


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_the_fixed_sg201_merge_runs_on_real_specs(version, vllm_source, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """vLLM's own kv_cache_interface.py, fixed by `--fix` and executed (its imports resolve to the installed
    vLLM): specs that agree merge to their value, a causal and a non-causal spec fail the merge's assert as its
    other agreement checks do (tests/runtime/test_fix_proofs.py runs vLLM's grouping on it)."""
    import torch

    target = tmp_path / "vllm" / "v1" / "kv_cache_interface.py"
    target.parent.mkdir(parents=True)
    shutil.copy(vllm_source(version) / "v1" / "kv_cache_interface.py", target)
    out = cli("check", "vllm", "--fix", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout.strip()) == (0, "Found 1 finding (1 fixed, 0 remaining)."), out.stderr
    fixed = _load(target, f"specguard_fixed_kv_cache_interface_{version.replace('.', '_')}")

    def spec(non_causal: bool):  # type: ignore[no-untyped-def]
        return fixed.MLAAttentionSpec(
            block_size=16, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, non_causal_multi_token_decode=non_causal
        )

    assert fixed.MLAAttentionSpec.merge([spec(True), spec(True)]).non_causal_multi_token_decode is True
    assert fixed.MLAAttentionSpec.merge([spec(False)] * 3).non_causal_multi_token_decode is False
    with pytest.raises(
        AssertionError,
        match=r"^MLAAttentionSpec: all layers of one KV cache group must agree on non_causal_multi_token_decode, got ",
    ):
        fixed.MLAAttentionSpec.merge([spec(False), spec(False), spec(True)])


def _findings(root: Path) -> list:  # type: ignore[type-arg]
    return check_paths([root / "vllm"], use_cache=False).findings


def _key(finding, root: Path) -> tuple[str, str, str | None]:  # type: ignore[no-untyped-def]
    return str(Path(finding.path).relative_to(root)), finding.code, finding.symbol


def _changed_lines(diff: str) -> dict[str, set[int]]:
    """Per file, the original lines a unified diff removes, and for an insertion the line it goes before."""
    changed: dict[str, set[int]] = {}
    path, line = "", 0
    for row in diff.splitlines():
        if row.startswith("--- "):
            path = row[4:]
        elif row.startswith("@@ "):
            line = int(row.split()[1].split(",")[0][1:])
        elif row.startswith("-"):
            changed.setdefault(path, set()).add(line)
            line += 1
        elif row.startswith("+") and not row.startswith("+++ "):
            changed.setdefault(path, set()).add(line)
        elif row.startswith(" "):
            line += 1
    return changed


def _scope_lines(path: Path, symbol: str) -> range:
    """The lines of the function a finding's scope names (Class.method)."""
    tree = ast.parse(path.read_text())
    owner, _, name = symbol.rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == owner:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return range(item.lineno, (item.end_lineno or item.lineno) + 1)
    raise AssertionError(f"{symbol} not in {path}")


def _import_lines(path: Path) -> set[int]:
    tree = ast.parse(path.read_text())
    last = max(s.end_lineno or s.lineno for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)))
    return {last + 1}


def test_fix_on_a_copy_of_vllm_0_28_0(vllm_source, cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The issue's acceptance: `--fix --unsafe-fixes` fixes what it offers (SG201, the SG103 call sites whose own
    query's count follows from the call) and nothing else, every changed file compiles and stays formatted at
    vLLM's line length (ruff format, 88 columns, leaves it as it is), a second `--fix` changes nothing, and
    `--diff` shows exactly those edits, each inside the function a fixed finding names (or an import line);
    the diffs docs/check.md shows are pieces of that output."""
    original, fixed = tmp_path / "original", tmp_path / "fixed"
    for copy in (original, fixed):
        shutil.copytree(vllm_source("0.28.0"), copy / "vllm")
    before = _findings(original)
    offered = {_key(f, original) for f in before if f.fix is not None}
    assert {(k[1], k[2]) for k in offered} == {
        ("SG201", "MLAAttentionSpec.merge"),
        ("SG103", "DFlashSpeculator.propose"),
        ("SG103", "MultiModuleMTPSpeculator.propose"),
        ("SG103", "AutoRegressiveSpeculator._multi_step_decode"),
        ("SG103", "AutoRegressiveSpeculator._fused_multi_step_decode"),
    }
    dflash = next(f for f in before if f.code == "SG102")
    assert dflash.fix is None and "no fix offered: the override is not a pure forward" in dflash.message

    diff = cli("check", "vllm", "--diff", "--unsafe-fixes", "--no-cache", cwd=original)
    assert diff.returncode == 1 and diff.stdout.endswith("\nWould fix 5 findings.\n"), diff.stdout + diff.stderr
    page = (Path(__file__).resolve().parent.parent / "docs" / "check.md").read_text()
    shown = [block.split("```", 1)[0] for block in page.split("```diff\n")[1:]]
    assert len(shown) == 2 and all(block in diff.stdout for block in shown)  # the page's diffs are real
    out = cli("check", "vllm", "--fix", "--unsafe-fixes", "--no-cache", cwd=fixed)
    assert out.returncode == 1 and "Found 7 findings (5 fixed, 2 remaining)." in out.stdout, out.stdout + out.stderr

    after = _findings(fixed)
    assert not any(f.code == "SG201" for f in after)
    assert offered.isdisjoint({_key(f, fixed) for f in after})
    assert {_key(f, fixed) for f in after} == {_key(f, original) for f in before} - offered
    assert any(f.code == "SG102" and "no fix offered" in f.message for f in after)

    changed = {
        p.relative_to(fixed)
        for p in fixed.rglob("*.py")
        if p.read_bytes() != (original / p.relative_to(fixed)).read_bytes()
    }
    assert changed == {Path(k[0]) for k in offered}
    for rel in changed:
        compile((fixed / rel).read_text(), str(rel), "exec")
    formatted = [sys.executable, "-m", "ruff", "format", "--check", "--line-length", "88", "--no-cache"]
    assert subprocess.run([*formatted, *(str(original / r) for r in changed)], capture_output=True).returncode == 0
    layout = subprocess.run([*formatted, *(str(fixed / r) for r in changed)], capture_output=True, text=True)
    assert layout.returncode == 0, layout.stdout + layout.stderr  # formatted before, formatted after
    snapshot = {rel: (fixed / rel).read_bytes() for rel in changed}
    again = cli("check", "vllm", "--fix", "--unsafe-fixes", "--no-cache", cwd=fixed)
    assert "fixed" not in again.stdout and {rel: (fixed / rel).read_bytes() for rel in changed} == snapshot

    # --diff shows exactly what --fix wrote: applied to the original copy, it gives the fixed files
    patch = diff.stdout.rsplit("\n\n", 1)[0] + "\n"
    subprocess.run(["git", "apply", "-p0", "-"], input=patch, text=True, cwd=original, check=True)
    for rel in changed:
        assert (original / rel).read_bytes() == (fixed / rel).read_bytes(), rel
    # ... and touches no line outside the functions the fixed findings name, but an added import
    pristine = Path(vllm_source("0.28.0")).parent
    for path, lines in _changed_lines(diff.stdout).items():
        scopes = [_scope_lines(pristine / path, k[2]) for k in offered if k[0] == path]  # type: ignore[arg-type]
        allowed = set().union(*scopes) | _import_lines(pristine / path)
        assert lines <= allowed, (path, sorted(lines - allowed))
