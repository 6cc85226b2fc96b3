"""One large or costly file costs a "not judged", never the machine (issue 26 items 5 and 6, `specguard check`).

A file is parsed and judged within a budget of its own: one over the per-file budget (measured before anything
expensive runs: about how many tokens it holds) is "not judged: too large for the budget", named on stderr and
counted by `--statistics`, while the rest of the tree is checked and reported; the evaluations of one file share a
budget of steps and work, so many functions that each spend their own budget cannot add up to minutes. Every run
here is a child process under RLIMIT_AS and RLIMIT_CPU: a run that would fill memory or spin fails there with a
MemoryError or a kill, which these tests see; nothing is timed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bounded import limits

MEMORY = 1 << 30  # address space: a check of a small tree needs about 300 MiB of it
CPU_SECONDS = 40  # a file under the budget, whatever its shape, takes under 30 s of CPU here (the costliest: 26 s)
HANG_GUARD = 600  # only catches a blocked read (no CPU used); never reached by a run that works

GOOD = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class GoodFileSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)
"""
HEAD = GOOD.split("\n\n\n")[0] + "\n\n\n"
GOOD_FINDING = "good.py:7:16: SG101"

SPECULATOR = (
    "class S{i}(DraftModelSpeculator):\n    def propose(self, n):\n        return build_attn_metadata(num_reqs={n})\n\n"
)

# The shapes: every one names the sink, so the prefilter sends it on to the parsers.
LARGE = {
    # 7 MB in 1M lines, then 400k lines (2.4 GB and 1.5 GB before)
    "1M-lines": "# build_attn_metadata\n" + "x = 12\n" * 1_000_000,
    "400k-lines": "# build_attn_metadata\n" + "x = 12\n" * 400_000,
    # a 15.6 MB list literal (7.8 GB and a MemoryError before)
    "15.6MB-literal": "# build_attn_metadata\nX = [" + "1," * 7_800_000 + "]\n",
    # 100,000 speculators, each reaching the sink: every stage has work to do on every one of them
    "many-speculators": HEAD + "".join(SPECULATOR.format(i=i, n="n") for i in range(100_000)),
}


def _check(root: Path, *args: str, cache: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "check", *([] if cache else ["--no-cache"]), *args],
        cwd=root,
        capture_output=True,
        text=True,
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
        env={**os.environ, "XDG_CACHE_HOME": str(root / "xdg")},
    )


def _tree(root: Path, name: str, text: str) -> Path:
    (root / "good.py").write_text(GOOD)
    (root / name).write_text(text)
    return root


@pytest.mark.parametrize("shape", sorted(LARGE))
def test_a_large_file_is_not_judged_and_its_sibling_is_checked(shape: str, tmp_path: Path) -> None:
    _tree(tmp_path, "big.py", LARGE[shape])
    out = _check(tmp_path, ".")
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stdout + out.stderr, out.stderr[-2000:]
    assert out.returncode == 1 and GOOD_FINDING in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "big.py" not in out.stdout  # no finding, no SG000: the file was not judged at all
    (note,) = [line for line in out.stderr.splitlines() if "big.py" in line]
    assert note.startswith("specguard: note: big.py: not judged: too large for the budget (about "), note
    stats = _check(tmp_path, ".", "--statistics")
    assert stats.returncode == 1 and "1\tSG101\tmetadata-outside-helper" in stats.stdout
    assert "specguard: note: 1 file was not judged (too large for the budget)" in stats.stderr.splitlines()


def test_a_file_not_judged_is_named_again_by_a_warm_run(tmp_path: Path) -> None:
    """The cache keeps the scan that found the file over the budget: a warm run says so as the cold one did."""
    _tree(tmp_path, "big.py", LARGE["400k-lines"])
    (tmp_path / ".git").mkdir()  # the project's root, where its cache goes
    for path in (tmp_path / "big.py", tmp_path / "good.py"):
        os.utime(path, (1_700_000_000, 1_700_000_000))  # old enough for the scan to be kept
    cold = _check(tmp_path, ".", cache=True)
    assert list(tmp_path.glob(".specguard_cache/*/scans.msgpack")), "the cold run kept no scan"
    warm = _check(tmp_path, ".", cache=True)
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout) == (1, cold.stdout)
    assert GOOD_FINDING in warm.stdout and warm.stderr == cold.stderr
    assert "specguard: note: big.py: not judged: too large for the budget (about " in warm.stderr, warm.stderr


def _overrides_under(budget: int) -> str:
    """Speculators that each override a shared helper: libcst parses all of it, three rules report every class and
    two fix it (of the shapes measured, with the next one, what costs most a token)."""
    from specguard.program.reading import approximate_tokens

    one = (
        "class S{i}(DraftModelSpeculator):\n"
        "    def _build_draft_attn_metadata(self, n):\n"
        "        prepare_dcp_local_seq_lens(n)\n"
        "        return build_attn_metadata(num_reqs=n, num_tokens=n)\n\n"
    )
    head = HEAD + "from vllm.v1.attention.backends.utils import prepare_dcp_local_seq_lens\n\n"
    count = budget * 95 // 100 // approximate_tokens(one.format(i=10_000))
    return head + "".join(one.format(i=i) for i in range(count))


def _fork_speculators_under(budget: int) -> str:
    """The example fork's DFlash speculator (a finding of SG101, SG102, SG103 and SG104 each, all four evaluated
    and fixed), repeated under new names."""
    from specguard.program.reading import approximate_tokens

    lines = (EXAMPLES / "spec_decode" / "dflash.py").read_text().splitlines(keepends=True)
    imports = "".join(line for line in lines if line.startswith(("import ", "from ")))
    body = "".join(line for line in lines if not line.startswith(("import ", "from ")))
    count = (budget * 95 // 100 - approximate_tokens(imports)) // approximate_tokens(body)
    return imports + "".join(re.sub(r"\bDFlashSpeculator\b", f"DFlashSpeculator{i}", body) for i in range(count))


EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "myfork"
UNDER_THE_BUDGET = {"helper-overrides": (_overrides_under, 3), "fork-speculators": (_fork_speculators_under, 4)}


@pytest.mark.parametrize("shape", sorted(UNDER_THE_BUDGET))
def test_the_costliest_files_under_the_budget_are_judged_within_the_limits(shape: str, tmp_path: Path) -> None:
    """The budget is small enough: a file just under it, of the shapes that cost most a token (26 s of CPU and 500 MB on
    this project's machine), is judged whole under the same limits."""
    from specguard.program.reading import MAX_TOKENS, approximate_tokens

    make, findings_each = UNDER_THE_BUDGET[shape]
    text = make(MAX_TOKENS)
    assert MAX_TOKENS * 0.9 < approximate_tokens(text) < MAX_TOKENS
    shutil.copytree(EXAMPLES, tmp_path / "myfork")
    (tmp_path / "myfork" / "spec_decode" / "big.py").write_text(text)
    out = _check(tmp_path, "myfork/spec_decode/big.py", "--statistics")
    assert out.returncode == 1, out.stderr[-2000:]
    found = sum(int(line.split("\t")[0]) for line in out.stdout.splitlines() if "\tSG1" in line)
    assert found == findings_each * text.count("\nclass "), out.stdout + out.stderr[-2000:]
    assert "not judged" not in out.stderr and "not decided" not in out.stderr


# A helper that spends a whole evaluation's budget, called by a thousand speculators of one small file: each
# evaluation stays within its own budget, together they took a minute before.
HEAVY = (
    HEAD
    + "def heavy(n):\n    a = list(range(250))\n    for i in a:\n        for j in a:\n            n = n + i\n"
    + "    return n\n\n"
    + "".join(SPECULATOR.format(i=i, n="heavy(n)") for i in range(1000))
)


def test_the_evaluations_of_one_file_share_a_budget(tmp_path: Path) -> None:
    _tree(tmp_path, "heavy.py", HEAVY)
    out = _check(tmp_path, ".", "-v")
    assert out.returncode == 1 and GOOD_FINDING in out.stdout, out.stderr[-2000:]
    # SG101 and SG103 (which judges every build that is handed arguments) both run out of the shared budget
    assert "specguard: note: 2000 sites were not decided (SG101 1000, SG103 1000)" in out.stderr.splitlines()
    assert "the file's evaluations spent their budget" in out.stderr


# Values the evaluator must size before it builds or walks them, in a speculator's method that reaches the sink.
# WORDS is a module-level string of 14,000 distinct words (under the largest value's 100,000 characters).
WORDS = " ".join(f"w{i}" for i in range(14_000))
COSTLY = {
    "subscript-of-a-large-list": "L = WORDS.split()\nfor i in range(200):\n    x = L[n]\n",
    "comprehension-over-merged-dicts": (
        "D = dict(zip(WORDS.split(), WORDS.split()))\nfor i in range(200):\n    x = [k for k in {**D, **D} if n]\n"
    ),
    "unpacked-lists": "L = WORDS.split()\nfor i in range(200):\n    x = [*L, *L][n]\n",
    "nested-comprehensions": "L = WORDS.split()\nfor i in range(200):\n    x = [a + b for a in L for b in L if n][n]\n",
    "count-in-a-loop": "L = WORDS.split()\nfor i in range(250):\n    for j in range(150):\n        x = L.count(n)\n",
}


@pytest.mark.parametrize("attack", sorted(COSTLY))
def test_a_costly_value_in_a_checked_function_is_bounded(attack: str, tmp_path: Path) -> None:
    body = "".join(f"        {line}\n" for line in COSTLY[attack].splitlines())
    text = (
        f"{HEAD}WORDS = {WORDS!r}\n\n\nclass CostlySpeculator(DraftModelSpeculator):\n"
        f"    def propose(self, n):\n{body}        return build_attn_metadata(num_reqs=x)\n"
    )
    _tree(tmp_path, "costly.py", text)
    out = _check(tmp_path, ".", "-v")
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 1 and GOOD_FINDING in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    # judged within its budget, or counted and listed as not decided (the budget it spent named)
    decided = "costly.py:" in out.stdout and " SG101 " in out.stdout
    assert decided or "specguard: not decided: costly.py:" in out.stderr, out.stdout[-2000:] + out.stderr[-2000:]


def test_a_sparse_file_of_sixteen_gib_is_refused_from_its_status_and_the_walk_goes_on(tmp_path: Path) -> None:
    """Past the reader's cap a file is SG000 from its status, never read, and it is charged only what the reader
    may read of it: a 16 GiB sparse file named first no longer spends the run's byte budget and ends the walk."""
    (tmp_path / "good.py").write_text(GOOD)
    with open(tmp_path / "a_huge.py", "wb") as fh:  # walked before good.py
        fh.write(HEAD.encode())
        fh.truncate(16 << 30)
    out = _check(tmp_path, ".")
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 1 and GOOD_FINDING in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert "a_huge.py:1:1: SG000 file too large" in out.stdout
