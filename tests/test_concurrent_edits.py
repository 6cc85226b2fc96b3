"""Files saved while `specguard check` runs (issue 16 items 4 and 5).

An editor saving atomically (temp file + rename) in a loop, in another process, while runs go on over the same
tree and the same cache: every run sees each file whole, as one version or the other, with that version's
findings; no false SG000, no internal error, no finding lost; and what the racing runs left in the cache gives
each version exactly the findings a run without a cache gives it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specguard.composition import check_paths
from specguard.settings import Settings

BASE = textwrap.dedent("""
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


    class Mid(DraftModelSpeculator):
        pass
""")

# Two versions of each leaf, with the same classes (so a file's findings depend on its own version only) but
# findings on other lines and in other numbers; a false SG000 or a lost finding cannot hide in either.
LEAF_A = textwrap.dedent("""
    from fork.base import Mid
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata


    class Leaf{n}(Mid):
        def propose(self, num_reqs):
            return build_attn_metadata(num_reqs=num_reqs)
""")
LEAF_B = textwrap.dedent("""
    # saved by the editor: the findings moved and one more came
    from fork.base import Mid
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata


    class Leaf{n}(Mid):
        def prepare(self, num_reqs):
            meta = build_attn_metadata(num_reqs=num_reqs)
            return meta

        def propose(self, num_reqs):
            return build_attn_metadata(num_reqs=num_reqs)
""")
LEAVES = 8

EDITOR = textwrap.dedent("""
    import os, sys
    folder, versions, stop, dated = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "dated"
    names = sorted(os.listdir(os.path.join(versions, "a")))
    texts = [{n: open(os.path.join(versions, v, n), "rb").read() for n in names} for v in ("a", "b")]
    saves = 0
    while not os.path.exists(stop):
        for name in names:
            tmp = os.path.join(folder, "." + name + ".swp")
            with open(tmp, "wb") as fh:
                fh.write(texts[saves % 2][name])
            if dated:  # as `cp -p`, `tar` or `rsync -t` save: each version with the old time it was made at
                os.utime(tmp, ns=(0, 1_000_000_000 * (1_600_000_000 + saves % 2)))
            os.replace(tmp, os.path.join(folder, name))
        saves += 1
    print(saves)
""")


def _tree(root: Path, versions: Path) -> Path:
    fork = root / "fork"
    fork.mkdir(parents=True)
    (fork / "__init__.py").write_text("")
    (fork / "base.py").write_text(BASE)
    for version, text in (("a", LEAF_A), ("b", LEAF_B)):
        (versions / version).mkdir(parents=True)
        for n in range(LEAVES):
            (versions / version / f"leaf{n}.py").write_text(text.format(n=n))
    for n in range(LEAVES):
        (fork / f"leaf{n}.py").write_text(LEAF_A.format(n=n))
    return fork


def _by_file(findings: list) -> dict[str, list[tuple[int, int, str, str]]]:  # type: ignore[type-arg]
    grouped: dict[str, list[tuple[int, int, str, str]]] = {}
    for f in findings:
        grouped.setdefault(Path(f.path).name, []).append((f.line, f.col, f.code, f.message))
    return grouped


def _settle(fork: Path, version: Path | None = None) -> None:
    """Put a version in place (or keep what is there) and date it back, as a file saved a while ago is."""
    if version is not None:
        for leaf in version.iterdir():
            (fork / leaf.name).write_bytes(leaf.read_bytes())
    old = time.time() - 60
    for path in fork.iterdir():
        os.utime(path, (old, old))


@pytest.mark.parametrize("mtimes", ["now", "dated"])
def test_runs_during_atomic_saves_see_whole_versions_and_cache_only_what_they_computed(
    tmp_path: Path, mtimes: str
) -> None:
    """`now`: every save is new, so no scan is kept while the editor saves (racy stamps); `dated`: saves carry old
    mtimes, so runs take scans from the cache and find the file changed under them before the rules read it."""
    versions = tmp_path / "versions"
    fork = _tree(tmp_path / "project", versions)
    settings = Settings(root=fork.parent, cache_dir=tmp_path / "cache")

    expected = {}  # what a run without a cache reports for each version of each leaf
    for version in ("a", "b"):
        _settle(fork, versions / version)
        expected[version] = _by_file(check_paths([fork], settings, use_cache=False).findings)
    assert all(len(expected["a"][f"leaf{n}.py"]) == 1 and len(expected["b"][f"leaf{n}.py"]) == 2 for n in range(8))

    stop = tmp_path / "stop"
    editor = subprocess.Popen(
        [sys.executable, "-c", EDITOR, str(fork), str(versions), str(stop), mtimes], stdout=subprocess.PIPE, text=True
    )
    seen: dict[str, set[str]] = {}
    try:
        for _ in range(40):
            result = check_paths([fork], settings)
            assert result.errors == []
            assert [f for f in result.findings if f.code == "SG000"] == []
            for name, found in _by_file(result.findings).items():
                matches = [v for v in ("a", "b") if found == expected[v][name]]
                assert matches, f"{name}: {found} is the findings of neither version"
                seen.setdefault(name, set()).update(matches)
            assert set(_by_file(result.findings)) == {f"leaf{n}.py" for n in range(LEAVES)}, "a file lost them all"
    finally:
        stop.touch()
        saves = int(editor.communicate(timeout=60)[0])
    assert saves > 40, "the editor hardly saved anything: the runs raced nothing"
    assert any(len(v) == 2 for v in seen.values()), "no run ever saw the second version"

    for version in ("a", "b"):  # the racing runs' cache, now used for each version: nothing wrong in it
        _settle(fork, versions / version)
        for _ in range(2):  # the first run stores the scans, the second is fully warm
            assert _by_file(check_paths([fork], settings).findings) == expected[version]


SPEC = textwrap.dedent("""
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


    class Spec(DraftModelSpeculator):
        def propose(self, num_reqs):
            return build_attn_metadata(num_reqs=num_reqs){line_noqa}
""")
FILE_NOQA = "# specguard: noqa: SG101\n"
MISPLACED = "x = 1  # specguard: noqa\n"


@pytest.mark.parametrize(
    ("checked", "saved", "reported", "warned"),
    [
        (SPEC.format(line_noqa=""), FILE_NOQA + SPEC.format(line_noqa=""), True, False),
        (FILE_NOQA + SPEC.format(line_noqa=""), SPEC.format(line_noqa=""), False, False),
        (SPEC.format(line_noqa=""), SPEC.format(line_noqa="  # noqa: SG101"), True, False),
        (SPEC.format(line_noqa="  # noqa: SG101"), SPEC.format(line_noqa=""), False, False),
        (MISPLACED + SPEC.format(line_noqa=""), SPEC.format(line_noqa=""), True, True),
        (SPEC.format(line_noqa=""), MISPLACED + SPEC.format(line_noqa=""), True, False),
    ],
    ids=["file-noqa-added", "file-noqa-removed", "line-noqa-added", "line-noqa-removed", "misplaced", "misplaced-new"],
)
def test_suppressions_are_judged_on_the_bytes_the_rules_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checked: str, saved: str, reported: bool, warned: bool
) -> None:
    """The file is saved after the rules ran and before suppressions are judged: the comments that count (line and
    file-level noqa, and the warning for a misplaced one) are those of the version the findings came from."""
    from specguard.analysis import engine

    spec = tmp_path / "spec.py"
    spec.write_text(checked)
    evaluate = engine._Run.evaluate

    def then_saved(self, result, pool):  # type: ignore[no-untyped-def]
        evaluate(self, result, pool)
        spec.write_text(saved)

    monkeypatch.setattr(engine._Run, "evaluate", then_saved)
    result = check_paths([spec], Settings(root=tmp_path), use_cache=False)
    assert [f.code for f in result.findings] == (["SG101"] if reported else [])
    assert [w.split(": ", 1)[1] for w in result.warnings] == (
        ["`# specguard: noqa` after code exempts nothing; put it on a line of its own"] if warned else []
    )
    assert spec.read_text() == saved


# ---- the evaluator reads the project's modules from the run's bytes too ------------------------------------------

SPECULATOR = textwrap.dedent("""
    from fork.counts import padded
    from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


    class Drafter(DraftModelSpeculator):
        def propose(self, num_reqs, num_tokens):
            batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
            return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=padded(batch_desc))
""")
# A helper module the evaluator follows the count into; it names the sink, so stage one summarizes it.
COUNTS = textwrap.dedent("""
    # the counts handed to build_attn_metadata
    def padded(d):
        return {count}
""")


def test_the_evaluator_reads_each_module_once_from_the_bytes_every_stage_uses(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A helper module saved after stage one read it: the speculator's judgement is of the helper as stage one read
    it (no second read of any file the run summarized), and the cache keeps that judgement only for those bytes."""
    import specguard.program.reading as source
    from specguard.analysis import engine

    fork = tmp_path / "fork"
    fork.mkdir()
    (fork / "__init__.py").write_text("")
    (fork / "spec.py").write_text(SPECULATOR)
    (fork / "counts.py").write_text(COUNTS.format(count="d.num_tokens"))
    _settle(fork)
    settings = Settings(root=tmp_path, cache_dir=tmp_path / "cache")

    reads: list[str] = []
    real_read, real_scan = source.read_stamped, engine._Run.scan

    paths: list[Path] = []

    def counted(path):  # type: ignore[no-untyped-def]
        reads.append(Path(path).name)
        paths.append(Path(path).resolve())
        return real_read(path)

    def scan_then_save(self, files, workers):  # type: ignore[no-untyped-def]
        pool = real_scan(self, files, workers)
        (fork / "counts.py").write_text(COUNTS.format(count="0"))  # saved after stage one read it
        return pool

    for module in ("specguard.program.reading", "specguard.analysis.scan", "specguard.analysis.engine"):
        monkeypatch.setattr(f"{module}.read_stamped", counted)
    monkeypatch.setattr(engine._Run, "scan", scan_then_save)
    first = check_paths([fork], settings)
    assert [(Path(f.path).name, f.code) for f in first.findings] == [("spec.py", "SG103")]
    assert "returned by `padded`" in first.findings[0].message
    # each file once, the installed vLLM's modules the evaluation read included: the evaluator used stage one's bytes
    assert {name: reads.count(name) for name in ("__init__.py", "counts.py", "spec.py")} == dict.fromkeys(
        ("__init__.py", "counts.py", "spec.py"), 1
    ), reads
    assert len(paths) == len(set(paths)), paths  # (two of vLLM's modules may share a name: `speculator.py`)

    monkeypatch.setattr(engine._Run, "scan", real_scan)
    _settle(fork)
    again = check_paths([fork], settings)  # the helper changed since: its judgement is not taken from the cache
    assert again.findings == [] and again.errors == []
