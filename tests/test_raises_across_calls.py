"""A callee that raises on some of its paths and returns on others, called inside a `try`: its raising paths reach
the caller's handlers, which catch what their classes and bases catch, so the value a handler computes is judged
on those paths (before, only a callee raising on every path reached a handler, and a fallback to the padded count
in a handler went unseen). Outside a `try`, nothing changes."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

HEAD = """
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
"""

FLAGGED = {
    "a handler falls back to the padded count when the helper finds no real one": """
        class Drafter(DraftModelSpeculator):
            def _real(self, real):
                if real is None:
                    raise ValueError("no real count")
                return real

            def propose(self, batch_desc, num_reqs, real):
                try:
                    n = self._real(real)
                except ValueError:
                    n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
    """,
    "two calls deep, past a handler too narrow for it, into one for a base class": """
        class Drafter(DraftModelSpeculator):
            def _inner(self, real):
                if real is None:
                    raise LookupError("no count")
                return real

            def _outer(self, real):
                return self._inner(real) + 0

            def propose(self, batch_desc, num_reqs, real):
                try:
                    n = self._outer(real)
                except KeyError:
                    n = real
                except Exception:
                    n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
    """,
    "the try's else sets the real count only where the helper returned": """
        class Drafter(DraftModelSpeculator):
            def _real(self, real):
                if real is None:
                    raise ValueError("no real count")
                return real

            def propose(self, batch_desc, num_reqs, real):
                try:
                    counted = self._real(real)
                except ValueError:
                    n = batch_desc.num_tokens
                else:
                    n = counted
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
    """,
}

CLEAN = {
    "the helper raises outside FULL graphs and the handler takes the real count": """
        class Drafter(DraftModelSpeculator):
            def _require_full(self, batch_desc):
                if batch_desc.cg_mode != CUDAGraphMode.FULL:
                    raise RuntimeError("not a FULL graph")

            def propose(self, batch_desc, num_reqs, real):
                n = batch_desc.num_tokens
                try:
                    self._require_full(batch_desc)
                except RuntimeError:
                    n = real
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
    """,
    "a handler for another class never runs: the helper's ValueError goes on up": """
        class Drafter(DraftModelSpeculator):
            def _real(self, real):
                if real is None:
                    raise ValueError("no real count")
                return real

            def propose(self, batch_desc, num_reqs, real):
                try:
                    n = self._real(real)
                except TypeError:
                    n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
    """,
}


@pytest.mark.parametrize("source", FLAGGED.values(), ids=list(FLAGGED))
def test_a_handler_reached_from_a_callee_that_may_raise_is_judged(source: str) -> None:
    text = HEAD + textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)
    assert [(f.code, f.line) for f in check_source(text)] == [("SG103", line)]


@pytest.mark.parametrize("source", CLEAN.values(), ids=list(CLEAN))
def test_a_handler_is_judged_only_on_the_paths_that_reach_it(source: str) -> None:
    assert check_source(HEAD + textwrap.dedent(source)) == []


# A call the evaluation cannot read (a library's) may raise anything: a handler after it is reached under the
# condition that it raised, so what the handler computes is undecided and counted, never silently taken as clean.
UNREADABLE_HEAD = HEAD + "from mylib.counts import real_count\n"

UNDECIDED = {
    "except Exception: falls back to the padded count": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                try:
                    n = real_count(real)  # call
                except Exception:
                    n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # site
    """,
    "a handler for named classes, after a method of an unreadable object": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                n = real
                try:
                    self.runner.check_counts(n)  # call
                except (ValueError, KeyError) as exc:
                    n = max(batch_desc.num_tokens, 1)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # site
    """,
    "the handler's fallback, where the else takes the library's count": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                try:
                    counted = real_count(real)  # call
                except Exception:
                    n = batch_desc.num_tokens
                else:
                    n = counted
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # site
    """,
}

SETTLED = {
    "the handler takes the real count": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                try:
                    n = real_count(real)
                except Exception:
                    n = real
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
    """,
    "the handler raises again": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                try:
                    n = real_count(real)
                except Exception:
                    n = batch_desc.num_tokens
                    raise
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
    """,
    "outside a try the call returns or ends the path": """
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                n = real_count(real)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
    """,
}


def _line_of(text: str, mark: str) -> int:
    return next(n for n, row in enumerate(text.splitlines(), 1) if row.rstrip().endswith(mark))


@pytest.mark.parametrize("source", UNDECIDED.values(), ids=list(UNDECIDED))
def test_a_handler_after_an_unreadable_call_is_undecided_and_counted(cli, tmp_path, source: str) -> None:  # type: ignore[no-untyped-def]
    text = UNREADABLE_HEAD + textwrap.dedent(source)
    (tmp_path / "spec.py").write_text(text)
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    call = next(row for row in text.splitlines() if row.rstrip().endswith("# call")).split("# call")[0].strip()
    call = call.split(" = ", 1)[-1]  # the call, without what its value is assigned to
    assert out.stderr.splitlines() == [
        "specguard: note: 1 site was not decided (SG103 1)",
        f"specguard: not decided: spec.py:{_line_of(text, '# site')}: SG103 `Drafter.propose`: `num_tokens_padded=` "
        f"of `_build_draft_attn_metadata`: depends on whether `{call}` (spec.py:{_line_of(text, '# call')}) raises",
    ]


@pytest.mark.parametrize("source", SETTLED.values(), ids=list(SETTLED))
def test_a_handler_after_an_unreadable_call_that_keeps_the_real_count_is_clean(cli, tmp_path, source: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "spec.py").write_text(UNREADABLE_HEAD + textwrap.dedent(source))
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", "")


def test_a_handler_reached_from_two_unreadable_calls_depends_on_both(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Raises from two calls reach one handler: it runs once per call that may have raised, each under its own
    condition (joined, they would leave a path under neither, and the fallback would be judged as always run)."""
    text = UNREADABLE_HEAD + textwrap.dedent("""
        class Drafter(DraftModelSpeculator):
            def propose(self, batch_desc, num_reqs, real):
                n = real
                try:
                    try:
                        n = real_count(real)
                    finally:
                        self.runner.synchronize()
                except Exception:
                    n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # site
    """)
    (tmp_path / "spec.py").write_text(text)
    out = cli("check", "spec.py", "-v", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "All checks passed!\n")
    lines = out.stderr.splitlines()
    assert lines[0] == "specguard: note: 1 site was not decided (SG103 1)" and len(lines) == 2
    assert f"spec.py:{_line_of(text, '# site')}: SG103" in lines[1]
    assert "whether `real_count(real)`" in lines[1] and "whether `self.runner.synchronize()`" in lines[1]
