"""`specguard config` against a hostile or odd `--vllm-source` (issue #16 items 1-3): a fork of a real release that
builds huge values in the code specguard evaluates, holds a FIFO or a link to /dev/zero among its modules, or has
a module CPython's parser refuses. Each run is a child process under RLIMIT_AS and RLIMIT_CPU: a run that would
fill memory or spin fails there with a MemoryError or a kill, which these tests would see."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork, replace, rewrite

from tests.bounded import limits

MEMORY = 1 << 30  # a normal run of `specguard config` needs well under 600 MiB of address space
CPU_SECONDS = 90
HANG_GUARD = 600  # only catches a blocked read (no CPU used); never reached by a run that works

# Inserted before ParallelConfig.__post_init__'s DCP check, which CFG105 judges (`-tp 2 -dcp 4` is refused).
ANCHOR = "        tp = self.tensor_parallel_size\n        pcp = self.prefill_context_parallel_size\n"
DISTINCT = 's = "' + "".join(chr(0x20000 + i) for i in range(50_000)) + '"\n'  # 50,000 distinct characters
COSTLY = {
    # Each builds or walks far more than a config check needs; the cases first.
    "comprehension-of-a-long-string": 's = "ab" * 50000\ngrid = [[c for c in s] for d in s]\n',
    "comprehension-of-copies": 's = "ab" * 50000\nbig = [s + c for c in s]\n',
    "str-replace": 's = "ab" * 50000\nbig = s.replace("a", s)\n',
    "join": 's = "ab" * 50000\nbig = s.join([s] * 100000)\n',
    "repeated-concatenation": 's = "ab" * 50000\nfor _ in [0] * 64:\n    s = s + s\n',
    "repeated-int-product": "x = 3 ** 200\nfor _ in [0] * 64:\n    x = x * x\n",
    # Many values each under the size cap: the work budget adds them up.
    "many-large-copies": 's = "ab" * 50000\nacc = []\nfor c in s:\n    acc.append(s.upper())\n',
    "printf-repetition": 'big = ("%(a)s" * 10000) % {"a": "ab" * 50000}\n',
    "format-repetition": 'big = ("{0}" * 20000).format("ab" * 50000)\n',
    "deep-nesting": 'x = []\nfor c in "ab" * 50000:\n    x = [x]\nok = len(x) == 1\n',
    "membership-in-a-loop": 'big = list("ab" * 50000)\nfor c in "ab" * 50000:\n    found = c in big\n',
    # Each path of an undecided test gets its own copy of the lists it holds, and paths that join are compared.
    "copies-at-undecided-tests": (
        'big = list("ab" * 40000)\nfor c in "ab" * 50000:\n    if os.cpu_count() == 1:\n        last = c\n'
    ),
    # Issue 26 item 6: values of 50,000 distinct elements, each sized before it is built or walked (the elements of
    # each were joined pairwise before: minutes where the same loop stopped at its budget in seconds).
    "comprehension-over-merged-dicts": (
        f"{DISTINCT}D = {{c: c for c in s}}\n"
        'for _ in "abc":\n    x = [k for k in {**D, **D} if os.cpu_count() == 1]\n'
    ),
    "unpacked-literals": f'{DISTINCT}for _ in "abc":\n    x = [*s, *s][os.cpu_count()]\n',
    "nested-comprehensions": f"{DISTINCT}x = [a for a in s for b in s for c in s if os.cpu_count() == 1]\n",
    "zips-in-a-loop": f"{DISTINCT}D = {{c: c for c in s}}\nfor c in s:\n    E = dict(zip(D, D))\n",
    "count-in-a-loop": f"{DISTINCT}L = list(s)\nfor c in s:\n    n = L.count(c)\n",
}
# Values too large to build are unknown and the check after them is still judged; spending a whole budget
# ends in "not judged: too costly to evaluate".
SPENT = {
    "comprehension-of-a-long-string",
    "comprehension-of-copies",
    "many-large-copies",
    "membership-in-a-loop",
    "copies-at-undecided-tests",
    "zips-in-a-loop",
    "count-in-a-loop",
}


def _config(source: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "config", "--vllm-source", str(source), "--", "m", *argv],
        capture_output=True,
        text=True,
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )


def _indented(code: str, by: int = 8) -> str:
    return "".join(" " * by + line + "\n" for line in code.splitlines())


@pytest.mark.parametrize("attack", sorted(COSTLY))
def test_a_costly_value_in_evaluated_code_is_bounded(
    attack: str, tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    tree = fork(source_dir("0.33.0"), tmp_path)
    rewrite(tree, "config/parallel.py", replace(ANCHOR, _indented(COSTLY[attack]) + ANCHOR))
    proc = _config(tree, "-tp", "2", "-dcp", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-2000:]
    assert "MemoryError" not in out and "Traceback" not in out
    if attack in SPENT:
        assert "CFG105 not judged: too costly to evaluate" in out, out[-2000:]
    else:
        assert "decode-context-parallel-size=4: CFG105 error" in out, out[-2000:]


def test_a_costly_value_in_the_parser_construction_is_bounded(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """The parser construction is evaluated for every run: a spent budget there costs its options, with a note,
    and the modelled options are still read."""
    tree = fork(source_dir("0.33.0"), tmp_path)
    docstring_end = 'keeps the argument definitions in one place.\n    """\n'
    code = _indented(COSTLY["many-large-copies"], 4)
    rewrite(tree, "entrypoints/common/cli_args.py", replace(docstring_end, docstring_end + code))
    proc = _config(tree, "-tp", "2", "-dcp", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "the parser construction was too costly to evaluate" in out
    assert "decode-context-parallel-size=4: CFG105 error" in out


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "directory", "too-large"])
def test_a_module_that_is_not_a_readable_file_is_named_and_skipped(
    kind: str, tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """A FIFO would block a plain open forever; a link to /dev/zero would fill memory. Both replace a module the
    evaluation reads (the KV-transfer config) and one it never needs."""
    tree = fork(source_dir("0.33.0"), tmp_path)
    for relpath in ("config/kv_transfer.py", "zz_unused.py"):
        path = tree / relpath
        if path.exists():
            path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev-zero-link":
            path.symlink_to("/dev/zero")
        elif kind == "directory":
            path.mkdir()
        else:
            with path.open("wb") as f:
                f.truncate(64 * 1024 * 1024)  # sparse: costs no disk
    proc = _config(tree, "-tp", "2", "-dcp", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    expected = {
        "fifo": "not a regular file (a FIFO)",
        "dev-zero-link": "a link out of the served tree, to /dev/zero",
        "directory": "not a regular file (a directory)",
        "too-large": "file too large",
    }[kind]
    assert f"config/kv_transfer.py ({expected}" in out, out[-2000:]
    assert "decode-context-parallel-size=4: CFG105 error" in out  # what can be judged still is


def test_a_module_too_deep_for_pythons_parser_is_named_and_the_rest_judged(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """A 20,000-term sum in config/parallel.py (under the per-file budget): CPython's parser raises RecursionError.
    The run names the file, reads the command line (it is not the user's fault), judges what does not need that
    file, and says which hazard it could not judge."""
    tree = fork(source_dir("0.33.0"), tmp_path)
    rewrite(tree, "config/parallel.py", lambda text: text + "\n_X = " + "+".join(["1"] * 20_000) + "\n")
    proc = _config(tree, "--tensor-parallel-size", "2", "-dcp", "4", "--attention-backend", "NO_SUCH_BACKEND")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "unrecognized arguments" not in out
    assert "config/parallel.py could not be read (cannot parse: RecursionError: expression nesting too deep)" in out
    assert "attention-backend=NO_SUCH_BACKEND: CFG112 error" in out  # judged: it needs the backend registry only
    assert "CFG105 not judged: " in out and "config/parallel.py" in out.split("CFG105 not judged: ")[1]


def test_a_module_over_the_per_file_budget_is_named_and_the_rest_judged(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    """A 15.6 MB list literal in a module the evaluation reads (issue 26 item 5: 5.8 GB before): the module is not
    parsed (the same per-file budget as `specguard check`'s), it is named, and what can be judged still is."""
    tree = fork(source_dir("0.33.0"), tmp_path)
    rewrite(tree, "config/kv_transfer.py", lambda text: text + "\n_X = [" + "1," * 7_800_000 + "]\n")
    proc = _config(tree, "-tp", "2", "-dcp", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "MemoryError" not in out and "Traceback" not in out
    assert "config/kv_transfer.py (too large for the budget (about 15,6" in out, out[-2000:]
    assert "decode-context-parallel-size=4: CFG105 error" in out


def test_the_serving_yaml_and_the_hazard_catalogue_are_read_as_regular_files_only(
    tmp_path: Path, source_dir: Callable[[str], Path]
) -> None:
    fifo = tmp_path / "serve.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "hazards.toml"
    zero.symlink_to("/dev/zero")
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "config", str(fifo), "--vllm-source", str(source_dir("0.33.0"))],
        capture_output=True,
        text=True,
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"specguard: error: {fifo}: not a regular file (a FIFO); specguard reads regular files only\n"
    config = tmp_path / "ok.yaml"
    config.write_text("model: m\n")
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "config", str(config), "--hazards", str(zero)],
        capture_output=True,
        text=True,
        preexec_fn=limits(MEMORY, CPU_SECONDS),
        timeout=HANG_GUARD,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(f"specguard: error: {zero}: cannot read hazard catalogue: not a regular file")
