"""Bad input never produces a traceback: one line, the documented exit code, and the good files still checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.composition import check_source

GOOD = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class GoodFileSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return build_attn_metadata(num_reqs=num_reqs)
"""
NEEDLE = "build_attn_metadata"  # makes the prefilter send the file on to the parsers


def run(cli, tmp_path: Path, name: str, content: bytes, *extra: str):  # type: ignore[no-untyped-def]
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / name).write_bytes(content)
    out = cli("check", ".", "--no-cache", *extra, cwd=tmp_path)
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    assert "good.py:7:16: SG101" in out.stdout, "the good file was not analyzed"
    return out


def sg000_line(out, name: str) -> str:  # type: ignore[no-untyped-def]
    (line,) = [x for x in out.stdout.splitlines() if x.startswith(f"{name}:") and " SG000 " in x]
    return line


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("syntax.py", f"def {NEEDLE}(:\n    pass\n".encode(), "syntax error"),
        ("latin1.py", f"# {NEEDLE}\nname = 'caf\xe9'\n".encode("latin-1"), "cannot decode file"),
        ("nul.py", f"x = 1\x00\n# {NEEDLE}\n".encode(), "NUL bytes"),
        ("utf16.py", f"# {NEEDLE}\n".encode("utf-16"), "NUL bytes"),
        ("deep.py", f"# {NEEDLE}\nx = {'(' * 3000}1{')' * 3000}\n".encode(), "nest"),
        ("deep_unary.py", f"# {NEEDLE}\nx = {'-' * 3000}1\n".encode(), "nesting too deep"),
        ("deep_binop.py", f"# {NEEDLE}\nx = {'1 + ' * 3000}1\n".encode(), "nesting too deep"),
    ],
)
def test_unreadable_file_is_sg000_and_others_still_checked(cli, tmp_path, name, content, reason) -> None:  # type: ignore[no-untyped-def]
    out = run(cli, tmp_path, name, content)
    assert out.returncode == 1
    assert reason in sg000_line(out, name)


@pytest.mark.parametrize(
    ("source", "version", "what"),
    [
        (f"# {NEEDLE}\ntype Rows = list[int]\n", (3, 12), "a `type` alias statement, PEP 695"),
        (f"# {NEEDLE}\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n", (3, 12), "type parameters, PEP 695"),
        (f"# {NEEDLE}\nclass Box[T]:\n    pass\n", (3, 12), "type parameters, PEP 695"),
        (f"# {NEEDLE}\nx = f'{{\"\\n\".join(rows)}}'\n", (3, 12), "an f-string that PEP 701 allows"),
    ],
)
def test_syntax_of_a_newer_python_names_both_versions(cli, tmp_path, source, version, what) -> None:  # type: ignore[no-untyped-def]
    """Issue 12 item 15: under 3.11 this was a bare "invalid syntax"; on a Python that has the syntax it parses."""
    out = run(cli, tmp_path, "newer.py", source.encode())
    running = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info >= version:
        assert "newer.py" not in out.stdout
    else:
        needed = ".".join(map(str, version))
        line = sg000_line(out, "newer.py")
        assert f"the file needs Python {needed} or newer ({what}) but specguard runs on Python {running}" in line


def test_a_plain_syntax_error_does_not_blame_the_python_version(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = run(cli, tmp_path, "broken.py", f"# {NEEDLE}\ntype = (\n".encode())
    assert "needs Python" not in sg000_line(out, "broken.py")


def test_undecodable_file_without_pack_names_is_still_reported(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = run(cli, tmp_path, "binary.py", b"\xff\xfe\xfa garbage")
    assert "cannot decode" in sg000_line(out, "binary.py")


def test_empty_file_is_fine(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = run(cli, tmp_path, "empty.py", b"")
    assert out.returncode == 1 and "empty.py" not in out.stdout


def test_five_megabyte_generated_file(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = "".join(f"def f{i}(a, b):\n    return {NEEDLE}(a + {i}, b * {i})\n\n" for i in range(90_000))
    assert len(body) > 5_000_000
    out = run(cli, tmp_path, "generated.py", body.encode())
    assert out.returncode == 1 and "generated.py" not in out.stdout  # not a speculator module: nothing to say


def test_symlink_loop_terminates(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path, tmp_path / "sub" / "loop")
    out = run(cli, tmp_path, "sub/x.py", b"x = 1\n")
    assert out.returncode == 1 and out.stdout.count("good.py:7:16: SG101") == 1


def test_a_broken_symlink_and_a_missing_path_are_findings_and_the_rest_is_checked(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As ruff's E902: a path that cannot be read is a finding of its own (SG000), in every format, and the other
    paths are still checked; exit code 1 (findings), never "All checks passed!"."""
    (tmp_path / "good.py").write_text(GOOD)
    os.symlink(tmp_path / "nowhere.py", tmp_path / "dangling.py")
    out = cli("check", "good.py", "missing.py", "dangling.py", cwd=tmp_path)
    assert out.returncode == 1 and out.stderr == ""
    assert out.stdout.splitlines()[:3] == [
        "dangling.py:1:1: SG000 not a file or directory (a broken symlink?)",
        "good.py:7:16: SG101 " + out.stdout.splitlines()[1].partition(" SG101 ")[2],
        "missing.py:1:1: SG000 no such file or directory",
    ]
    for fmt in ("json", "sarif", "github"):
        out = cli("check", "missing.py", "--output-format", fmt, cwd=tmp_path)
        assert out.returncode == 1 and "missing.py" in out.stdout and "SG000" in out.stdout, fmt


def test_unknown_command_and_bad_option_exit_2(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("frobnicate").returncode == 2
    out = cli("check", "--format", "xml")
    assert out.returncode == 2 and "invalid choice: 'xml'" in out.stderr


# ---- property test: generated and mutated Python never makes the engine fail -------------------------------

SEEDS = [
    Path(__file__).resolve().parent.parent / "examples" / "myfork" / p
    for p in (
        "spec_decode/dflash.py",
        "spec_decode/speculator.py",
        "kv_cache_interface.py",
        "attention/flashinfer_mla.py",
    )
]
# Every construct the evaluator (specguard/evaluation) follows, so that mutations exercise it: helpers and their
# summaries, attributes, containers, *args/**kwargs, guards in every form, loops, match, try, and SG201's merges.
DATAFLOW_SEED = """\
import functools
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


def padded(desc):
    return desc.num_tokens if desc else padded(desc)


class FlowSpeculator(DraftModelSpeculator):
    def _padded(self, batch_desc, *rest, **extra):
        self.total = self.total + batch_desc.num_tokens
        return max(batch_desc.num_tokens, self._other(batch_desc))

    def _other(self, d):
        return self._padded(d) if d else padded(d)

    def propose(self, num_reqs, num_tokens, query_start_loc_np, specs):
        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
        kw = dict(num_reqs=num_reqs, num_tokens_padded=self._padded(batch_desc))
        kw["num_tokens"] = [batch_desc.num_tokens][0]
        kw.update(step=(n := batch_desc.num_tokens))
        args = (num_reqs, num_reqs, *[n])
        cg_mode = batch_desc.cg_mode
        match cg_mode:
            case CUDAGraphMode.FULL:
                n = batch_desc.num_tokens
            case CUDAGraphMode.PIECEWISE | CUDAGraphMode.NONE if n:
                n = int(query_start_loc_np[-1])
            case _:
                pass
        for s in specs:
            if CUDAGraphMode.FULL is not s.cg_mode:
                continue
            while n > 0:
                n -= 1
                if n == 3:
                    break
            else:
                n = self.total
        self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self._other(batch_desc))
        try:
            assert batch_desc.cg_mode in (CUDAGraphMode.FULL,), "FULL only"
        except AssertionError:
            raise
        finally:
            n = {k: v for k, v in kw.items()}.get("num_tokens", n)
        fn = lambda x: build_attn_metadata(num_tokens=x)
        self._build_draft_attn_metadata(*args, **kw, num_tokens_padded=n)
        return build_attn_metadata(self.attn_groups, num_reqs, fn(n))


class FlowSpec:
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        flags = {s.non_causal_multi_token_decode for s in specs}
        merged = False
        for spec in specs:
            merged = merged or spec.non_causal_multi_token_decode
            if spec.non_causal_multi_token_decode != specs[0].non_causal_multi_token_decode:
                raise ValueError("mixed")
        assert len(flags) == 1
        kwargs = {"non_causal_multi_token_decode": functools.reduce(max, flags)}
        spec = cls(**kwargs, non_causal_multi_token_decode=any(flags) or merged)
        spec.non_causal_multi_token_decode = max(flags)
        return spec


class UnionSpec(FlowSpec):
    @classmethod
    def merge(cls, specs):
        flag = False
        for spec in specs:
            flag |= spec.non_causal_multi_token_decode
        return cls(non_causal_multi_token_decode=flag)
"""
SOURCES = [p.read_text() for p in SEEDS] + [DATAFLOW_SEED]
TOKENS = [
    "(",
    ")",
    ":",
    "\n",
    "    ",
    "if batch_desc.cg_mode == CUDAGraphMode.FULL:",
    "else",
    "=",
    ",",
    "**",
    "build_attn_metadata(",
    "num_tokens_padded=",
    "batch_desc.num_tokens",
    "class X(DraftModelSpeculator):",
    "def _build_attn_metadata(self):",
    "any(",
    "repeat_interleave(",
    "lambda:",
    "match batch_desc.cg_mode:",
    "case CUDAGraphMode.FULL:",
    "assert batch_desc.cg_mode != CUDAGraphMode.FULL",
    "return",
    "raise",
    "continue",
    "self.padded = batch_desc.num_tokens",
    "self._padded(batch_desc)",
    "*args",
    "for s in specs:",
    "while n:",
    "try:",
    "except:",
    ":=",
    "len(flags) == 1",
    "max(",
    "\\",
    "'",
    '"',
    "#",
    "@",
]


@st.composite
def mutated_python(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SOURCES))
    for _ in range(draw(st.integers(0, 6))):
        pos = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "duplicate"]))
        if action == "insert":
            text = text[:pos] + draw(st.sampled_from(TOKENS)) + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 40)) :]
        else:
            end = min(len(text), pos + draw(st.integers(1, 200)))
            text = text[:end] + text[pos:end] + text[end:]
    return text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_python())
def test_mutated_sources_never_crash_the_engine(text: str) -> None:
    for finding in check_source(text):
        assert finding.code.startswith("SG") and finding.line >= 1 and finding.message


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS + list("abcxyz0123 .[]{}")), max_size=120).map("".join))
def test_generated_token_soup_never_crashes_the_engine(text: str) -> None:
    for finding in check_source(text):
        assert finding.code.startswith("SG")


@pytest.mark.parametrize("depth", [400, 900])
@pytest.mark.parametrize("shape", ["-{}1", "1 + {}1", "a{}"])
def test_nesting_cpython_accepts_but_libcst_cannot_walk_is_sg000_not_a_crash(shape: str, depth: int) -> None:
    piece = {"-{}1": "-", "1 + {}1": "1 + ", "a{}": ".b"}[shape]
    expr = shape.format(piece * depth)
    text = f"""
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

class S(DraftModelSpeculator):
    def propose(self):
        x = {expr}
        return build_attn_metadata()
"""
    findings = check_source(text)
    assert [f.code for f in findings] in (["SG000"], ["SG101"])  # deep but walkable is fine too
    if findings[0].code == "SG000":
        assert "nesting too deep" in findings[0].message


def test_an_internal_error_in_one_file_keeps_the_other_files_findings(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specguard import composition
    from specguard.analysis import evaluate

    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "boom.py").write_text(GOOD.replace("GoodFile", "Boom"))
    real = evaluate.evaluate_file

    def flaky(path, *args):  # type: ignore[no-untyped-def]
        if path.endswith("boom.py"):
            raise ValueError("a bug in a rule")
        return real(path, *args)

    monkeypatch.setattr(evaluate, "evaluate_file", flaky)
    result = composition.check_paths([tmp_path], use_cache=False)
    assert [(Path(f.path).name, f.code) for f in result.findings] == [("good.py", "SG101")]
    assert result.errors == [
        f"{tmp_path / 'boom.py'}: internal error while analyzing: ValueError: a bug in a rule (please report it)"
    ]


def test_a_worker_killed_by_a_native_crash_costs_only_its_file(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A segfault in libcst's native parser kills the worker process; that file becomes SG000, the rest go on."""
    import signal

    from specguard import composition
    from specguard.analysis import engine, evaluate

    for i in range(6):
        (tmp_path / f"good{i}.py").write_text(GOOD)
    (tmp_path / "crash.py").write_text(GOOD.replace("GoodFile", "Crash"))
    real = evaluate.evaluate_file

    def crashing(path, *args):  # type: ignore[no-untyped-def]
        if path.endswith("crash.py"):
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(path, *args)

    monkeypatch.setattr(evaluate, "evaluate_file", crashing)
    monkeypatch.setattr(engine, "cores", lambda: 2)
    monkeypatch.setattr(engine, "_PARALLEL_MIN_FILES", 1)  # use workers even for this small tree
    result = composition.check_paths([tmp_path], use_cache=False)
    codes = sorted((Path(f.path).name, f.code) for f in result.findings)
    assert codes == [("crash.py", "SG000"), *((f"good{i}.py", "SG101") for i in range(6))]
    assert "parser crashed" in [f for f in result.findings if f.code == "SG000"][0].message


# ---- sources that are not regular files, or too large (issue 16: every read is of a regular file, with a cap) ----

MEMORY = 512 << 20  # the address space the runs below may map: /dev/zero read whole would need all of it


def _bounded(tmp_path: Path, *paths: str) -> subprocess.CompletedProcess:
    """`specguard check PATHS` in a child under RLIMIT_AS (memory) and a timeout that only a hang reaches."""
    code = (
        f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY}))\n"
        f"from specguard.cli import main\nraise SystemExit(main(['check', '--no-cache', *{list(paths)!r}]))\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-urandom"])
def test_a_source_that_is_not_a_regular_file_is_named_and_the_rest_is_checked(tmp_path, kind: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "good.py").write_text(GOOD)
    special = tmp_path / f"{kind}.py"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        special.symlink_to("/dev/" + kind.partition("-")[2])
    walked = _bounded(tmp_path, ".")  # walking a folder: only regular files are sources, the others named once
    assert walked.returncode == 1 and "good.py:7:16: SG101" in walked.stdout
    if kind == "fifo":
        assert walked.stderr == "specguard: note: not regular files, so not read: fifo.py (a FIFO)\n"
    else:
        assert walked.stderr.startswith(
            f"specguard: note: 1 symlink leads out of the folders checked and was not followed: {special.name} -> /dev/"
        )
    named = _bounded(tmp_path, "good.py", special.name)  # named: a finding of its own, the others still checked
    assert (named.returncode, named.stderr) == (1, "") and "good.py:7:16: SG101" in named.stdout
    assert (
        f"{special.name}:1:1: SG000 not a regular file or directory (specguard reads regular files only)"
        in named.stdout.splitlines()
    )


def test_a_source_over_the_size_cap_is_sg000_and_the_rest_is_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "good.py").write_text(GOOD)
    with open(tmp_path / "huge.py", "wb") as fh:
        fh.truncate(17 << 20)  # sparse: 17 MiB of NUL bytes that cost no disk
    out = _bounded(tmp_path, ".")
    assert out.returncode == 1 and "good.py:7:16: SG101" in out.stdout
    assert f"huge.py:1:1: SG000 file too large ({17 << 20} bytes; the limit is {16 << 20})" in out.stdout
