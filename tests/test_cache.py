"""The per-file cache: reused only while content, cross-file facts, pack, settings and version are unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from specguard.composition import check_paths
from specguard.settings import Settings

# the speculator base defines the shared helper, as vLLM's does (a speculator below one that defines none is a base)
BASE = "class DraftModelSpeculator:\n    def _build_attn_metadata(self, n):\n        return None\n"
LEAF = textwrap.dedent("""
    from fork.base import Mid
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

    class Leaf(Mid):
        def propose(self):
            return build_attn_metadata()
""")


def tree(tmp_path: Path, mid_base: str) -> Path:
    """A small project, saved a minute ago (a scan of a file saved within the last seconds is never cached)."""
    (tmp_path / "fork").mkdir(exist_ok=True)
    (tmp_path / "fork" / "__init__.py").write_text("")
    (tmp_path / "fork" / "base.py").write_text(BASE + f"class Mid({mid_base}):\n    pass\n")
    (tmp_path / "fork" / "leaf.py").write_text(LEAF)
    a_minute_ago = time.time() - 60
    for path in (tmp_path / "fork").iterdir():
        os.utime(path, (a_minute_ago, a_minute_ago))
    return tmp_path


def run(root: Path, **kw) -> list[str]:  # type: ignore[no-untyped-def]
    settings = Settings(root=root, cache_dir=root / "cache", **kw)
    return [f"{Path(f.path).name}:{f.line}:{f.code}" for f in check_paths([root / "fork"], settings).findings]


def bump(path: Path, text: str) -> None:
    """Rewrite a file and move its mtime, as an editor would (some filesystems have coarse mtimes)."""
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_warm_run_gives_the_same_findings(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    cold = run(root)
    assert cold == ["leaf.py:7:SG101"]
    assert run(root) == cold
    assert any((root / "cache").rglob("results.msgpack"))


def test_editing_the_file_invalidates_it(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    run(root)
    edited = LEAF.replace("return build_attn_metadata()", "x = 1\n        return build_attn_metadata()")
    bump(root / "fork" / "leaf.py", edited)
    assert run(root) == ["leaf.py:8:SG101"]


def test_a_change_in_another_file_reaches_the_unchanged_one(tmp_path: Path) -> None:
    """leaf.py does not change, but its class stops being a speculator when base.py changes Mid's base."""
    root = tree(tmp_path, "DraftModelSpeculator")
    assert run(root) == ["leaf.py:7:SG101"]
    bump(root / "fork" / "base.py", BASE + "class Mid(object):\n    pass\n")
    assert run(root) == []
    bump(root / "fork" / "base.py", BASE + "class Mid(DraftModelSpeculator):\n    pass\n")
    assert run(root) == ["leaf.py:7:SG101"]


def test_settings_and_packs_get_their_own_cache(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    assert run(root) == ["leaf.py:7:SG101"]
    assert run(root, ignore=["SG101"]) == []
    pack = root / "pack.toml"
    pack.write_text('[metadata]\nreplace = true\nsink = ["other_sink"]\n')
    assert run(root, rule_packs=[pack]) == []
    assert run(root) == ["leaf.py:7:SG101"]
    assert len(list((root / "cache").glob("v*"))) == 3


def test_results_of_other_code_get_their_own_cache(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A checkout or an editable install changes specguard's code without a new version: what the old code cached
    lies in another folder, never read by the new code."""
    from specguard.analysis import cache

    root = tree(tmp_path, "DraftModelSpeculator")
    assert run(root) == ["leaf.py:7:SG101"]
    monkeypatch.setattr(cache, "code_fingerprint", lambda: "the code of another checkout")
    assert run(root) == ["leaf.py:7:SG101"]
    assert len(list((root / "cache").glob("v*"))) == 2


def test_the_code_fingerprint_follows_every_module(tmp_path: Path) -> None:
    from specguard.program.discover import modules_fingerprint

    package = tmp_path / "package"
    (package / "rules").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    (package / "rules" / "b.py").write_text("B = 1\n")
    (package / "notes.txt").write_text("not a module\n")
    before = modules_fingerprint(str(package))
    (package / "notes.txt").write_text("still not a module\n")
    assert modules_fingerprint(str(package)) == before
    bump(package / "rules" / "b.py", "B = 2\n")  # same size: the modification time tells
    assert modules_fingerprint(str(package)) != before


def test_a_corrupt_cache_is_only_a_slower_run(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    run(root)
    for stored in (root / "cache").rglob("*.msgpack"):
        stored.write_bytes(b"not msgpack")
    assert run(root) == ["leaf.py:7:SG101"]


def test_warm_run_imports_neither_pydantic_nor_libcst_nor_the_evaluator_nor_the_runtime_stack(tmp_path: Path) -> None:
    root = tree(tmp_path, "DraftModelSpeculator")
    probe = textwrap.dedent("""
        import sys
        from specguard.cli import main
        code = main(["check", "fork", "--cache-dir", "cache"])
        names = ("libcst", "pydantic", "specguard.evaluation", "torch", "vllm", "flashinfer")
        print(code, sorted(m for m in names if m in sys.modules))
    """)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}  # no validated pack from earlier runs
    cold = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, env=env)
    # It validates the pack, judges leaf.py on the evaluator and parses it with libcst for the other rules.
    assert cold.stdout.splitlines()[-1] == "1 ['libcst', 'pydantic', 'specguard.evaluation']"
    warm = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, env=env)
    assert warm.stdout.splitlines()[-1] == "1 []"
    assert list((tmp_path / "xdg" / "specguard" / "validated").glob("pack-*.msgpack"))


FORWARD = textwrap.dedent("""
    from fork.base import Mid

    class Leaf(Mid):
        def _build_attn_metadata(self, n):
            return super()._build_attn_metadata(n)
""")


def test_a_finding_with_its_fix_survives_the_cache_and_fix_flags_share_it(tmp_path: Path) -> None:
    from specguard import _datafile
    from specguard.analysis.cache import ResultTable
    from specguard.findings import Finding
    from specguard.fix_model import Edit, Fix

    fix = Fix("unsafe", "Rewrite it", (Edit("x if y else z", 3, 5, 3, 9), Edit("", 1, 1, 2, 1)))
    table = {"key": [Finding("a.py", 3, 5, "SG103", "m", 3, 9, "A.f", fix), Finding("b.py", 1, 1, "SG000", "e")]}
    decoded = _datafile.decode(_datafile.encode("results", table), "results", ResultTable)
    assert decoded == table and decoded["key"][0].fix == fix and decoded["key"][1].fix is None

    root = tree(tmp_path, "DraftModelSpeculator")
    (root / "fork" / "leaf.py").write_text(FORWARD)
    settings = Settings(root=root, cache_dir=root / "cache")
    cold = check_paths([root / "fork"], settings).findings
    assert cold[0].fix is not None
    for fix_settings in [{}, {"fix": True, "unsafe_fixes": True, "unfixable": ["SG1"]}]:  # one cache for all
        warm = check_paths([root / "fork"], Settings(root=root, cache_dir=root / "cache", **fix_settings)).findings
        assert [(f, f.fix) for f in warm] == [(f, f.fix) for f in cold]
    assert len(list((root / "cache").glob("v*"))) == 1


def test_a_second_save_within_one_mtime_tick_is_never_served_from_the_cache(tmp_path: Path) -> None:
    """Same size, same mtime, other content: what two saves within one tick of a coarse clock look like. A scan
    made that close to its file's last change is used but not stored, so the second version is read."""
    root = tree(tmp_path, "DraftModelSpeculator")
    leaf = root / "fork" / "leaf.py"
    leaf.write_text(LEAF.replace("class Leaf(Mid)", "class Leaf(int)"))  # saved just now, not a speculator
    first = leaf.stat()
    assert run(root) == []
    leaf.write_text(LEAF)  # a speculator again
    os.utime(leaf, ns=(first.st_atime_ns, first.st_mtime_ns))
    assert leaf.stat().st_size == first.st_size
    assert run(root) == ["leaf.py:7:SG101"]


PLANNED_AHEAD = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from fork.impl import mark


def step(runner, backend, forward_batch: ForwardBatch):
    backend.init_forward_metadata(forward_batch)
    mark(forward_batch)
    return runner.forward(forward_batch)
"""
IMPL = """
from fork.flags import REPLAN


def mark(forward_batch):
    forward_batch.mark_forward_metadata_ready(replan_equivalent=REPLAN)
"""


def test_a_module_two_files_reach_through_a_name_kept_once_is_a_dependency_of_both(tmp_path: Path) -> None:
    """a.py and b.py both mark through `fork.impl.mark`, whose flag `fork.impl` imports from `fork.flags`: the
    evaluation resolves that name once and keeps it, and the second file judged must still depend on `fork.flags`
    (the kept name reads it again), so that changing only flags.py re-judges both in a warm run."""
    from specguard.packs import load_pack
    from tests.conftest import unpacked

    fork = tmp_path / "fork"
    fork.mkdir()
    (tmp_path / "sglang").symlink_to(unpacked("sglang", "0.5.23"))
    files = {
        "__init__.py": "",
        "flags.py": "REPLAN = False\n",
        "impl.py": IMPL,
        "a.py": PLANNED_AHEAD,
        "b.py": PLANNED_AHEAD,
    }
    for name, text in files.items():
        (fork / name).write_text(text)
    a_minute_ago = time.time() - 60
    for path in fork.iterdir():
        os.utime(path, (a_minute_ago, a_minute_ago))
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")
    pack = load_pack(builtin=("vllm", "sglang"))

    def findings() -> list[str]:
        return sorted(f"{Path(f.path).name}:{f.code}" for f in check_paths([fork], settings, pack=pack).findings)

    assert findings() == ["a.py:SG106", "b.py:SG106"]
    bump(fork / "flags.py", "REPLAN = True\n")
    assert findings() == []
