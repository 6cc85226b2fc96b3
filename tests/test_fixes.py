"""`specguard check --fix / --unsafe-fixes / --diff`: what the fixes change, what they never touch, and the
files they refuse to write."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specguard.composition import check_source, check_source_judged
from specguard.fix_model import Edit, Fix, apply_edits
from specguard.fixes.apply import compiles, fix_text
from specguard.rules import all_rules

HEAD = "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n\n"


def src(body: str) -> str:
    return HEAD + textwrap.dedent(body).lstrip("\n")


def fixed(text: str) -> str:
    return fix_text(text, check_source(text), check_source, lambda f: True).text


# ---- SG102: only a pure forward is deleted ----------------------------------------------------------------

PURE = [
    """
    class S(DraftModelSpeculator):
        def _build_attn_metadata(self, num_reqs, batch_desc, *args, step, **kwargs):
            '''Kept for the docs.'''
            return super()._build_attn_metadata(num_reqs, batch_desc, *args, step=step, **kwargs)
    """,
    """
    class S(DraftModelSpeculator):
        def _build_uniform_attn_metadata(self, num_reqs, /, batch_desc, *, step):
            return super(S, self)._build_uniform_attn_metadata(num_reqs, batch_desc=batch_desc, step=step)
    """,
]


@pytest.mark.parametrize("body", PURE)
def test_a_pure_forward_is_deleted_and_an_emptied_class_gets_pass(body: str) -> None:
    (finding,) = check_source(src(body))
    assert finding.code == "SG102" and finding.fix is not None
    assert fixed(src(body)) == src("class S(DraftModelSpeculator):\n    pass\n")


BASE_HELPER = """
class DraftModelSpeculator:
    def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, step, causal=True, *, slots=None):
        return None


class S(DraftModelSpeculator):
    def _build_attn_metadata{signature}:
        return super()._build_attn_metadata{forward}
"""


@pytest.mark.parametrize(
    ("signature", "forward", "applicability"),
    [
        (
            "(self, num_reqs, batch_desc, *args, step, **kwargs)",
            "(num_reqs, batch_desc, *args, step=step, **kwargs)",
            "safe",
        ),
        (
            "(self, num_reqs, batch_desc, query_start_loc_np, step)",
            "(num_reqs, batch_desc, query_start_loc_np, step)",
            "safe",
        ),
        ("(self, n, /, batch_desc, query_start_loc_np, step)", "(n, batch_desc, query_start_loc_np, step)", "safe"),
        ("(self, num_reqs, batch_desc, *, slots)", "(num_reqs, batch_desc, slots=slots)", "safe"),
        # a caller naming `batch` would break once the call reaches the base directly
        ("(self, num_reqs, batch, query_start_loc_np, step)", "(num_reqs, batch, query_start_loc_np, step)", "unsafe"),
        ("(self, num_reqs, batch_desc, *, flag)", "(num_reqs, batch_desc, flag=flag)", "unsafe"),
        ("(self, a, b, c, d, e, f, g)", "(a, b, c, d, e, f, g)", "unsafe"),
    ],
)
def test_deleting_a_forward_is_safe_only_where_every_call_binds_alike_on_the_base(
    signature: str, forward: str, applicability: str
) -> None:
    """Safe means a call that worked on the override binds the same way on the base helper: the base's
    definition must be in the project and take each parameter a caller may name or place there."""
    (finding,) = check_source(BASE_HELPER.format(signature=signature, forward=forward))
    assert finding.code == "SG102" and finding.fix is not None and finding.fix.applicability == applicability


def test_deleting_a_forward_to_a_base_outside_the_project_is_unsafe() -> None:
    (finding,) = check_source(src(PURE[0]))  # check_source sees no installed vLLM
    assert finding.fix is not None and finding.fix.applicability == "unsafe"
    assert "the base's parameters are not known to be the same" in finding.fix.message


@pytest.mark.parametrize(
    ("signature", "body", "why"),
    [
        # an override that only asserts before forwarding observes the helper and is not flagged (issue 28)
        ("self, n", "assert n\n            return super()._build_attn_metadata(n, n)", "it also asserts"),
        ("self, n", "return super()._build_attn_metadata(n + 1)", "it passes `n + 1`"),
        ("self, n, m", "return super()._build_attn_metadata(n)", "it does not pass on `m`"),
        ("self, n", "return super()._build_attn_metadata(m=n)", "it passes `n` for `m`"),
        ("self, n, m", "return super()._build_attn_metadata(m, n)", "it passes `m`"),
        ("self, n=1", "return super()._build_attn_metadata(n)", "gives `n` defaults of its own"),
        ("self, n", "return super()._build_uniform_attn_metadata(n)", "`super()._build_uniform_attn_metadata"),
        ("self, n", "super()._build_attn_metadata(n)", "it does not return `super()._build_attn_metadata(...)`"),
        (
            "self, n",
            "if n:\n                return\n            return super()._build_attn_metadata(n)",
            "returns early",
        ),
    ],
)
def test_any_other_override_keeps_its_finding_and_says_why_there_is_no_fix(signature, body, why) -> None:  # type: ignore[no-untyped-def]
    text = src(f"""
    class S(DraftModelSpeculator):
        def other(self):
            return 1

        def _build_attn_metadata({signature}):
            {body}
    """)
    (finding,) = check_source(text)
    assert finding.fix is None
    assert "no fix offered: the override is not a pure forward" in finding.message and why in finding.message
    assert fixed(text) == text


def test_a_decorated_override_is_not_a_pure_forward() -> None:
    text = src("""
    class S(DraftModelSpeculator):
        @torch.inference_mode()
        def _build_attn_metadata(self, n):
            return super()._build_attn_metadata(n)
    """)
    (finding,) = check_source(text)
    assert finding.fix is None and "it is decorated with `@torch.inference_mode`" in finding.message


# ---- SG104: the duplicate preparation goes only when the helper is all that reads it ----------------------

SG104_HEAD = "from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens, other\n" + HEAD


def sg104(body: str) -> str:
    return SG104_HEAD + textwrap.dedent(body).lstrip("\n")


def test_sg104_fix_keeps_the_other_imported_names_and_the_call_layout() -> None:
    text = sg104("""
    class S(DraftModelSpeculator):
        def propose(self, n, d):
            other(n)
            lens = prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)  # stale
            return self._build_attn_metadata(
                n,
                d,
                dcp_local_seq_lens=lens[:n],
            )
    """)
    (finding,) = check_source(text)
    assert finding.fix is not None and finding.fix.applicability == "unsafe"
    assert fixed(text) == textwrap.dedent("""\
        from vllm.v1.worker.gpu.cp_utils import other
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


        class S(DraftModelSpeculator):
            def propose(self, n, d):
                other(n)
                return self._build_attn_metadata(
                    n,
                    d,
                )
        """)


@pytest.mark.parametrize(
    "body",
    [
        # the buffer is read again after the call
        """
        prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)
        self.log(self.buf)
        return self._build_attn_metadata(n, dcp_local_seq_lens=self.buf)
        """,
        # the result reaches no shared helper
        """
        prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)
        return self._build_attn_metadata(n)
        """,
        # the local is the caller's parameter
        """
        lens = self.buf
        prepare_dcp_local_seq_lens(lens, self.seq_lens, n, 2, 0, 1)
        return self._build_attn_metadata(n, dcp_local_seq_lens=lens)
        """,
        # deleting it would leave an `else` empty
        """
        if n:
            x = 1
        else:
            prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)
        return self._build_attn_metadata(n, dcp_local_seq_lens=self.buf)
        """,
        # an `if` whose test calls something is not deleted with the statements it held
        """
        if self.enabled():
            prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)
        return self._build_attn_metadata(n, dcp_local_seq_lens=self.buf)
        """,
    ],
)
def test_sg104_offers_no_fix_when_something_else_may_read_what_it_prepared(body: str) -> None:
    params = "self, n, lens" if "lens = self.buf" in body else "self, n"
    function = f"class S(DraftModelSpeculator):\n    def propose({params}):\n" + textwrap.indent(
        textwrap.dedent(body).strip(), " " * 8
    )
    (finding,) = [f for f in check_source(sg104(function)) if f.code == "SG104"]
    assert finding.fix is None


def test_sg104_fix_deletes_an_if_it_empties_and_a_module_level_alias_import() -> None:
    text = textwrap.dedent("""\
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens as prep  # DCP
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


        class S(DraftModelSpeculator):
            def propose(self, n):
                lens = None
                if self.cp_size > 1:
                    prep(self.buf, self.seq_lens, n, 2, 0, 1)
                    lens = self.buf
                else:
                    lens = None
                return self._build_attn_metadata(n, dcp_local_seq_lens=None if lens is None else lens[:n])
        """)
    assert fixed(text) == textwrap.dedent("""\
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


        class S(DraftModelSpeculator):
            def propose(self, n):
                return self._build_attn_metadata(n)
        """)


# ---- edits keep everything outside the change ---------------------------------------------------------------


def test_edits_keep_comments_blank_lines_crlf_tabs_and_non_ascii_outside_the_change() -> None:
    text = (
        "# -*- coding: utf-8 -*-\r\n"
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator  # é\r\n"
        "\r\n"
        "x = {  'odd':   1 }   # kept as it is\r\n"
        "class S(DraftModelSpeculator):\r\n"
        "\tdef propose(self):  # ünïcode before the change\r\n"
        "\t\treturn 'ß'   # spacing kept\r\n"
        "\r\n"
        "\r\n"
        "\t# about the override\r\n"
        "\tdef _build_attn_metadata(self, n):\r\n"
        "\t\treturn super()._build_attn_metadata(n)\r\n"
        "\t# a trailing comment of the class\r\n"
        "y = [1,\r\n"
        "     2]\r\n"
    )
    after = fixed(text)
    removed = (  # the override with the blank lines and comment above it, which libcst counts as its own
        "\r\n\r\n\t# about the override\r\n\tdef _build_attn_metadata(self, n):\r\n"
        "\t\treturn super()._build_attn_metadata(n)\r\n"
    )
    assert removed in text and after == text.replace(removed, "", 1)


def test_the_fixer_refuses_a_fix_whose_finding_is_still_reported_or_that_breaks_parsing() -> None:
    text = src(PURE[0])
    (finding,) = check_source(text)
    end_of_class_line = len(text.splitlines()[3]) + 1
    keeps = Fix("safe", "adds a comment", (Edit("  # still here", 4, end_of_class_line, 4, end_of_class_line),))
    breaks = Fix("safe", "breaks it", (Edit("def (", 3, 1, 3, 1),))
    for bad_fix, why in [(keeps, "the rules still report it"), (breaks, "the result does not parse")]:
        crafted = finding.__class__(**{**finding.__dict__, "fix": bad_fix})
        result = fix_text(text, [crafted], check_source, lambda f: True)
        assert result.text == text and result.applied == []
        (line,) = result.refused
        assert line.startswith("example.py:") and f"SG102 fix not applied: {why}" in line


def test_overlapping_fixes_are_applied_one_round_after_the_other() -> None:
    text = src("""
    class S(DraftModelSpeculator):
        def _build_attn_metadata(self, n):
            return super()._build_attn_metadata(n)
        def _build_uniform_attn_metadata(self, n):
            return super()._build_uniform_attn_metadata(n)
    """)
    first, second = check_source(text)
    assert first.fix is not None and second.fix is not None and first.fix.overlaps([second.fix])
    result = fix_text(text, [first, second], check_source, lambda f: True)
    assert len(result.applied) == 2 and result.refused == []
    assert result.text == src("class S(DraftModelSpeculator):\n    pass\n")


def test_apply_edits_rejects_overlapping_edits() -> None:
    with pytest.raises(ValueError, match="overlapping"):
        apply_edits("abc\n", [Edit("x", 1, 1, 1, 3), Edit("y", 1, 2, 1, 4)])


# ---- the command line -----------------------------------------------------------------------------------

SAFE = src(PURE[0])
UNSAFE = sg104("""
class S(DraftModelSpeculator):
    def propose(self, n):
        prepare_dcp_local_seq_lens(self.buf, self.seq_lens, n, 2, 0, 1)
        return self._build_attn_metadata(n, dcp_local_seq_lens=self.buf)
""")
SAFE_FIXED = src("class S(DraftModelSpeculator):\n    pass\n")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "safe.py").write_text(SAFE)
    (tmp_path / "unsafe.py").write_text(UNSAFE)
    (tmp_path / "clean.py").write_text("x = 1\n")
    return tmp_path


def test_text_report_marks_fixable_findings_and_counts_them_as_ruff_does(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", ".", "--no-cache", cwd=tree)
    lines = out.stdout.splitlines()
    assert out.returncode == 1
    assert lines[0].startswith("safe.py:5:9: SG102 [*] speculator `S` overrides")
    assert lines[1].startswith("unsafe.py:7:9: SG104 `S.propose` calls")  # unsafe: no marker without the flag
    assert lines[2:] == [
        "Found 2 findings.",
        "[*] 1 fixable with `--fix` (1 unsafe fix available with `--fix --unsafe-fixes`).",
    ]
    out = cli("check", ".", "--no-cache", "--unsafe-fixes", cwd=tree)
    assert "unsafe.py:7:9: SG104 [*]" in out.stdout and out.stdout.endswith("[*] 2 fixable with `--fix`.\n")
    out = cli("check", "unsafe.py", "--no-cache", cwd=tree)
    assert out.stdout.endswith("Found 1 finding.\n1 unsafe fix available with `--fix --unsafe-fixes`.\n")
    out = cli("check", "unsafe.py", "--no-cache", "--no-unsafe-fixes", cwd=tree)
    assert out.stdout.endswith("Found 1 finding.\n")
    out = cli("check", ".", "--no-cache", "--unfixable", "SG1", cwd=tree)
    assert "[*]" not in out.stdout and out.stdout.endswith("Found 2 findings.\n")


def test_fix_applies_safe_fixes_then_reports_what_remains(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", ".", "--fix", cwd=tree)
    assert out.returncode == 1, out.stderr
    assert (tree / "safe.py").read_text() == SAFE_FIXED and (tree / "unsafe.py").read_text() == UNSAFE
    assert out.stdout.splitlines()[-2:] == [
        "Found 2 findings (1 fixed, 1 remaining).",
        "1 unsafe fix available with `--fix --unsafe-fixes`.",
    ]
    out = cli("check", ".", "--fix", "--unsafe-fixes", cwd=tree)
    assert (out.returncode, out.stdout.strip()) == (0, "Found 1 finding (1 fixed, 0 remaining).")
    compile((tree / "unsafe.py").read_text(), "unsafe.py", "exec")
    before = {p.name: p.read_bytes() for p in tree.glob("*.py")}
    again = cli("check", ".", "--fix", "--unsafe-fixes", cwd=tree)
    assert (again.returncode, again.stdout) == (0, "All checks passed!\n")  # a second --fix changes nothing
    assert {p.name: p.read_bytes() for p in tree.glob("*.py")} == before


def test_diff_prints_what_fix_writes_writes_nothing_and_exits_1_only_with_a_change(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    before = {p.name: p.read_text() for p in tree.glob("*.py")}
    out = cli("check", ".", "--diff", "--no-cache", cwd=tree)
    assert out.returncode == 1 and {p.name: p.read_text() for p in tree.glob("*.py")} == before
    assert out.stdout.startswith("--- safe.py\n+++ safe.py\n@@ -2,6 +2,4 @@\n")
    assert out.stdout.endswith("\nWould fix 1 finding (1 additional fix available with `--unsafe-fixes`).\n")
    both = cli("check", ".", "--diff", "--unsafe-fixes", "--no-cache", cwd=tree).stdout
    assert both.endswith("\nWould fix 2 findings.\n") and "--- unsafe.py" in both
    patch = both.rsplit("\n\n", 1)[0] + "\n"
    subprocess.run(["git", "apply", "--unidiff-zero", "-"], input=patch, text=True, cwd=tree, check=True)
    patched = {p.name: p.read_text() for p in tree.glob("*.py")}
    for name, text in before.items():
        (tree / name).write_text(text)
    cli("check", ".", "--fix", "--unsafe-fixes", cwd=tree)
    assert {p.name: p.read_text() for p in tree.glob("*.py")} == patched  # --diff shows exactly what --fix writes
    out = cli("check", ".", "--diff", cwd=tree)
    assert (out.returncode, out.stdout) == (0, "")
    out = cli("check", "unsafe.py", "--diff", cwd=tree.parent / tree.name)
    assert out.returncode == 0


def test_diff_with_only_unsafe_fixes_says_how_to_get_them(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    out = cli("check", "unsafe.py", "--diff", "--no-cache", cwd=tree)
    assert (out.returncode, out.stdout) == (0, "No findings would be fixed (1 fix available with `--unsafe-fixes`).\n")


def test_pyproject_keys_fix_unsafe_fixes_and_unfixable(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    (tree / "pyproject.toml").write_text('[tool.specguard]\nfix = true\nunsafe-fixes = true\nunfixable = ["SG102"]\n')
    out = cli("check", ".", cwd=tree)
    assert (tree / "safe.py").read_text() == SAFE and (tree / "unsafe.py").read_text() != UNSAFE
    assert out.stdout.splitlines()[-1] == "Found 2 findings (1 fixed, 1 remaining)."
    (tree / "pyproject.toml").write_text('[tool.specguard]\nfixable = ["SG104"]\nfix = true\n')
    assert cli("check", ".", "--no-fix", cwd=tree).stdout.endswith("Found 1 finding.\n")
    assert (tree / "safe.py").read_text() == SAFE


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('fix = "sometimes"', "[tool.specguard] key 'fix': Input should be a valid boolean"),
        ("unsafe-fixes = 1.5", "[tool.specguard] key 'unsafe-fixes': Input should be a valid boolean"),
        ('fixable = "SG1"', "[tool.specguard] key 'fixable': Input should be a valid list"),
        ("unfixible = []", "unknown key 'unfixible' in [tool.specguard]; did you mean 'unfixable'?"),
        ('unfixable = ["SG9"]', "unknown rule selector 'SG9'"),
    ],
)
def test_bad_fix_settings_are_one_line_and_exit_2(cli, tree: Path, table: str, message: str) -> None:  # type: ignore[no-untyped-def]
    (tree / "pyproject.toml").write_text(f"[tool.specguard]\n{table}\n")
    out = cli("check", ".", "--fix", cwd=tree)
    assert out.returncode == 2 and out.stdout == "" and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert (tree / "safe.py").read_text() == SAFE


# ---- files that must be left alone --------------------------------------------------------------------------


def test_a_file_with_a_syntax_error_is_left_untouched_and_the_others_are_fixed(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    broken = SAFE + "\ndef broken(:\n"
    (tree / "broken.py").write_text(broken)
    out = cli("check", ".", "--fix", cwd=tree)
    assert (tree / "broken.py").read_text() == broken and (tree / "safe.py").read_text() == SAFE_FIXED
    assert "broken.py:9:1: SG000 syntax error" in out.stdout and out.returncode == 1
    assert out.stderr == "specguard: warning: broken.py: not fixed: it has a source error (SG000)\n"


@contextmanager
def unwritable(path: Path):  # type: ignore[no-untyped-def]
    """A file this process really cannot write, and the reason the fixer gives: root ignores modes, so root gets the
    immutable attribute; anyone else, a file without write permission."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield "cannot write it: Operation not permitted"
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(stat.S_IREAD)
        try:
            yield "it is read-only (mode 0400)"
        finally:
            path.chmod(mode)


def test_an_unwritable_file_is_left_untouched_with_one_line_and_the_others_are_fixed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "locked").mkdir()
    locked = tmp_path / "locked" / "spec.py"
    locked.write_text(SAFE)
    (tmp_path / "open.py").write_text(SAFE)
    with unwritable(locked) as reason:
        out = cli("check", ".", "--fix", "--no-cache", cwd=tmp_path)
    assert locked.read_text() == SAFE and (tmp_path / "open.py").read_text() == SAFE_FIXED
    (note,) = out.stderr.splitlines()
    assert note.startswith(f"specguard: warning: locked/spec.py: not fixed: {reason}")
    assert out.returncode == 1 and "locked/spec.py:5:9: SG102 [*]" in out.stdout


def test_a_file_changed_between_read_and_write_is_left_as_it_now_is(monkeypatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from specguard.cli import main
    from specguard.fixes import apply as fixer

    (tmp_path / "a.py").write_text(SAFE)
    (tmp_path / "b.py").write_text(SAFE)
    edited = SAFE + "# edited by someone else meanwhile\n"
    real = fixer.fix_text

    def meanwhile(text, findings, recheck, applies, chosen=None):  # type: ignore[no-untyped-def]
        result = real(text, findings, recheck, applies, chosen)
        if findings and findings[0].path.endswith("a.py"):
            (tmp_path / "a.py").write_text(edited)  # another editor saves while specguard computes the fix
        return result

    monkeypatch.setattr(fixer, "fix_text", meanwhile)
    monkeypatch.chdir(tmp_path)
    main(["check", ".", "--fix", "--no-cache"])
    assert (tmp_path / "a.py").read_text() == edited and (tmp_path / "b.py").read_text() == SAFE_FIXED
    err = capsys.readouterr().err.splitlines()
    assert err == ["specguard: warning: a.py: not fixed: it changed while specguard was fixing it; left as it is"]


def test_a_file_changed_after_the_check_is_not_fixed_from_stale_positions(monkeypatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from specguard.analysis import engine
    from specguard.cli import main

    (tmp_path / "a.py").write_text(SAFE)
    real = engine.check_paths
    calls = []

    def then_edited(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = real(*args, **kwargs)
        if not calls:
            (tmp_path / "a.py").write_text("# moved\n" + SAFE)
        calls.append(1)
        return result

    monkeypatch.setattr(engine, "check_paths", then_edited)
    monkeypatch.chdir(tmp_path)
    main(["check", ".", "--fix", "--no-cache"])
    assert (tmp_path / "a.py").read_text() == "# moved\n" + SAFE
    assert "a.py: not fixed: it changed after it was checked; run specguard again" in capsys.readouterr().err


def test_a_named_symlink_is_written_through_keeping_the_link_and_the_mode(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    real = tmp_path / "real.py"
    real.write_text(SAFE)
    real.chmod(0o640)
    (tmp_path / "pkg").mkdir()
    link = tmp_path / "pkg" / "link.py"
    link.symlink_to(real)
    cli("check", "pkg/link.py", "--fix", "--no-cache", cwd=tmp_path)
    assert link.is_symlink() and real.read_text() == SAFE_FIXED
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left behind


def test_a_file_in_another_encoding_is_written_back_in_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = "# -*- coding: latin-1 -*-\n# caf\xe9\n" + SAFE
    (tmp_path / "l1.py").write_bytes(text.encode("latin-1"))
    cli("check", "l1.py", "--fix", "--no-cache", cwd=tmp_path)
    assert (tmp_path / "l1.py").read_bytes() == ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + SAFE_FIXED).encode(
        "latin-1"
    )


def test_the_documented_diff_is_what_diff_prints_on_the_examples(cli) -> None:  # type: ignore[no-untyped-def]
    repo = Path(__file__).resolve().parent.parent
    page = (repo / "docs" / "check.md").read_text()
    block = page.split("$ specguard check examples/ --diff\n", 1)[1].split("```", 1)[0]
    out = cli("check", "examples/", "--diff", "--no-cache", cwd=repo)
    assert out.returncode == 1 and out.stdout == block


@pytest.mark.parametrize(
    ("flags", "counts"), [((), "(2 fixed, 5 remaining)"), (("--unsafe-fixes",), "(3 fixed, 4 remaining)")]
)
def test_the_documented_counts_of_fix_on_the_examples(cli, tmp_path: Path, flags: tuple[str, ...], counts: str) -> None:  # type: ignore[no-untyped-def]
    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "examples", tmp_path / "examples")
    out = cli("check", "examples/", "--fix", "--no-cache", *flags, cwd=tmp_path)
    assert f"Found 7 findings {counts}." in out.stdout
    assert f"`Found 7 findings {counts}.`" in " ".join((repo / "docs" / "check.md").read_text().split())


# ---- the same fix, written every which way ---------------------------------------------------------------

FILLER = ["", "# a comment", "x = {  'a':1 }  # odd spacing", "if x:\n    pass", "y = (\n    1,\n)"]
METHOD = ["def other{i}(self):\n    return {i}  # kept", "@property\ndef prop{i}(self):\n    '''Doc.'''\n    return 1"]


@st.composite
def forwarding_module(draw: st.DrawFn) -> str:
    """A speculator module whose class holds a pure forward among other methods, comments and odd layout."""
    params = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=0, max_size=4, unique=True))
    by_keyword = draw(st.lists(st.booleans(), min_size=len(params), max_size=len(params)))
    first_kw = next((i for i, k in enumerate(by_keyword) if k), len(params))  # positional ones come first
    args = [p if i < first_kw else f"{p}={p}" for i, p in enumerate(params)]
    one_per_line = "".join(f"\n    {a}," for a in args) + "\n"  # with a trailing comma
    call_args = one_per_line if draw(st.booleans()) else ", ".join(args)
    override = (
        f"def _build_attn_metadata(self, {', '.join(params)}):\n    return super()._build_attn_metadata({call_args})"
    )
    if draw(st.booleans()):
        override = "# the override\n" + override
    members = [m.format(i=i) for i, m in enumerate(draw(st.lists(st.sampled_from(METHOD), max_size=3)))]
    members.insert(draw(st.integers(0, len(members))), override)
    sep = draw(st.sampled_from(["\n", "\n\n", "\n\n# between\n"]))
    body = textwrap.indent(sep.join(members), "    ")
    before = "\n".join(draw(st.lists(st.sampled_from(FILLER), max_size=3)))
    after = "\n".join(draw(st.lists(st.sampled_from(FILLER), max_size=3)))
    text = f"{HEAD}{before}\n\nclass S(DraftModelSpeculator):\n{body}\n{after}\n"
    return text.replace("\n", "\r\n") if draw(st.booleans()) else text


def _without_override(tree: ast.Module) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = [n for n in node.body if getattr(n, "name", "") != "_build_attn_metadata"] or [ast.Pass()]
    return ast.dump(tree)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forwarding_module())
def test_a_forward_written_any_way_is_deleted_and_nothing_else_moves(text: str) -> None:
    (finding,) = check_source(text)
    assert finding.fix is not None, finding.message
    after = fixed(text)
    assert ast.dump(ast.parse(after)) == _without_override(ast.parse(text))
    kept = iter(text.splitlines())
    new = [line for line in after.splitlines() if line != "    pass"]  # what a class left empty gets
    assert all(any(line == old for old in kept) for line in new)  # every other line, in order, unchanged
    assert fixed(after) == after


def test_suppressed_and_baselined_findings_are_not_fixed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = SAFE.splitlines()
    lines[4] += "  # noqa: SG102"  # on the reported line, the `def`
    suppressed = "\n".join(lines) + "\n"
    (tmp_path / "noqa.py").write_text(suppressed)
    (tmp_path / "known.py").write_text(SAFE)
    assert cli("check", "known.py", "--write-baseline", "base.json", cwd=tmp_path).returncode == 0
    out = cli("check", ".", "--fix", "--baseline", "base.json", "--no-cache", cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "All checks passed!\n", "")
    assert (tmp_path / "known.py").read_text() == SAFE and (tmp_path / "noqa.py").read_text() == suppressed


def test_an_internal_error_while_fixing_one_file_costs_only_that_file(monkeypatch, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from specguard.analysis import engine
    from specguard.cli import main

    (tmp_path / "a.py").write_text(SAFE)
    (tmp_path / "b.py").write_text(SAFE)
    real = engine._Run.recheck

    def flaky(self, path, text):  # type: ignore[no-untyped-def]
        if path.endswith("a.py"):
            raise RuntimeError("boom")
        return real(self, path, text)

    monkeypatch.setattr(engine._Run, "recheck", flaky)
    monkeypatch.chdir(tmp_path)
    assert main(["check", ".", "--fix", "--no-cache"]) == 1
    assert (tmp_path / "a.py").read_text() == SAFE and (tmp_path / "b.py").read_text() == SAFE_FIXED
    assert capsys.readouterr().err == (
        "specguard: warning: a.py: not fixed: internal error: RuntimeError: boom (please report it)\n"
    )


SEEDS = [SAFE, UNSAFE, *PURE, *(textwrap.dedent(r.bad) for r in all_rules().values())]
# SG103's bad example with its import cut by the mangling, as the property test found it
MANGLED_IMPORT = textwrap.dedent(all_rules()["SG103"].bad).replace("import CUDAGraphMode", "import C\nUDAGraphMode", 1)


@st.composite
def mutated_seed(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(["\n", "    ", "#", "(", ")", ",", "x", "pass\n", "\\\n", "'", "n=1", "*a"]))
        text = text[:pos] + piece + text[pos + draw(st.integers(0, 3)) :]
    return text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_seed())
def test_fixing_any_mangled_source_keeps_it_parsing_and_never_adds_a_finding(text: str) -> None:
    before, undecided = check_source_judged(text)
    result = fix_text(text, before, check_source, lambda f: True)
    if result.text == text:
        return
    ast.parse(result.text)
    assert compiles(result.text) or not compiles(text)  # a fix never breaks code the compiler accepted
    # A fix may decide a site that was listed as not decided (an import it adds binds a name the mangling cut),
    # never add a finding to a site that was decided.
    after = [f for f in check_source(result.text) if (f.code, f.symbol) not in {(j.code, j.scope) for j in undecided}]
    assert len(after) <= len(before) - len(result.applied) and not any(f.code == "SG000" for f in after)


def test_a_fix_that_binds_a_cut_name_may_decide_sites_that_were_listed_as_not_decided() -> None:
    # found by the property above: the mangling cut `CUDAGraphMode` in the import, so two guards on it were not
    # decided; the fix of another site imports the name, and they become findings.
    text = MANGLED_IMPORT
    before, undecided = check_source_judged(text)
    assert {(j.code, j.scope) for j in undecided} == {
        ("SG103", "MyDraftSpeculator.propose_graphed"),
        ("SG103", "MyDraftSpeculator.propose_block"),
    }
    result = fix_text(text, before, check_source, lambda f: True)
    assert "from vllm.config.compilation import CUDAGraphMode" in result.text
    after = check_source(result.text)
    assert {f.symbol for f in after} - {f.symbol for f in before} == {
        "MyDraftSpeculator.propose_graphed",
        "MyDraftSpeculator.propose_block",
    }


# ---- SG201: the agreement check ----------------------------------------------------------------------------

SPEC = """\
class FullAttentionSpec:
    @classmethod
    def merge(klass, specs):
{body}
"""


def sg201(body: str) -> str:
    return SPEC.format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8))


def test_sg201_fix_collects_any_iterable_keeps_comments_above_and_avoids_taken_names() -> None:
    text = sg201("""
    flags = [s.non_causal_multi_token_decode for s in specs]
    non_causal_multi_token_decode_values = 1
    # the merged flag
    non_causal_multi_token_decode = all(flags)  # one for the group
    return klass(non_causal_multi_token_decode=non_causal_multi_token_decode)
    """)
    assert fixed(text) == sg201("""
    flags = [s.non_causal_multi_token_decode for s in specs]
    non_causal_multi_token_decode_values = 1
    non_causal_multi_token_decode_values1 = set(flags)
    if len(non_causal_multi_token_decode_values1) > 1:
        raise AssertionError(
            f"{klass.__name__}: all layers of one KV cache group must agree on "
            "non_causal_multi_token_decode, got "
            f"{non_causal_multi_token_decode_values1}"
        )
    # the merged flag
    non_causal_multi_token_decode = all(
        non_causal_multi_token_decode_values1
    )  # one for the group
    return klass(non_causal_multi_token_decode=non_causal_multi_token_decode)
    """)


def test_sg201_fails_as_the_methods_own_checks_do() -> None:
    """An `assert` beside a method that asserts (and so vanishes under `python -O` with them); `raise
    AssertionError` in one that raises or checks nothing: vLLM's callers that probe a merge catch that."""
    asserting = sg201("""
    assert all(s.kind == specs[0].kind for s in specs), "one kind per group"
    return klass(non_causal_multi_token_decode=max(s.non_causal_multi_token_decode for s in specs))
    """)
    raising = sg201("""
    if len({s.kind for s in specs}) > 1:
        raise ValueError("one kind per group")
    return klass(non_causal_multi_token_decode=max(s.non_causal_multi_token_decode for s in specs))
    """)
    assert "assert len(non_causal_multi_token_decode_values) <= 1, (" in fixed(asserting)
    assert "raise AssertionError(" in fixed(raising) and "assert len" not in fixed(raising)
    for text in (asserting, raising):
        assert check_source(fixed(text)) == [] and fixed(fixed(text)) == fixed(text)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            "build = lambda g: klass(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in g))\n"
            "return build(specs)",
            "the reduction sits in a lambda or comprehension",
        ),
        (
            "flag = sum(s.non_causal_multi_token_decode for s in specs)\n"
            "return klass(non_causal_multi_token_decode=flag)",
            "`sum()` has no value that stands for agreeing layers",
        ),
        (
            "for flag in [any(s.non_causal_multi_token_decode for s in specs)]:\n"
            "    return klass(non_causal_multi_token_decode=flag)",
            "part of a loop or `elif` header",
        ),
        (
            "return klass(non_causal_multi_token_decode=any(  # why: the draft layers\n"
            "    s.non_causal_multi_token_decode for s in specs\n"
            "))",
            "a comment",
        ),
    ],
)
def test_sg201_offers_no_fix_where_it_cannot_keep_the_meaning_and_says_why(body: str, why: str) -> None:
    findings = check_source(sg201(body))
    assert findings and all(f.code == "SG201" and f.fix is None for f in findings)
    assert all("; no fix offered: " in f.message for f in findings) and why in findings[-1].message


def test_the_readme_check_output_is_what_check_prints_on_the_examples(cli) -> None:  # type: ignore[no-untyped-def]
    """The README's example is the real output, line for line (each message's first clause: issue 32)."""
    repo = Path(__file__).resolve().parent.parent
    block = (repo / "README.md").read_text().split("$ specguard check examples/\n", 1)[1].split("```", 1)[0]
    assert block == cli("check", "examples/", "--no-cache", cwd=repo).stdout


def test_json_statistics_count_what_fix_would_fix(cli, tree: Path) -> None:  # type: ignore[no-untyped-def]
    rows = json.loads(cli("check", ".", "--statistics", "--format", "json", "--no-cache", cwd=tree).stdout)
    assert {r["code"]: (r["count"], r["fixable"], r["fixable_count"]) for r in rows} == {
        "SG102": (1, True, 1),
        "SG104": (1, False, 0),  # unsafe: fixable only with --unsafe-fixes, as ruff counts
    }
    out = cli("check", ".", "--statistics", "--format", "json", "--unsafe-fixes", "--no-cache", cwd=tree).stdout
    assert all(r["fixable_count"] == 1 for r in json.loads(out))


# ---- edits from `ast` nodes (the fixes of the rules on the dataflow layer) --------------------------------


def _call(tree: ast.AST, name: str) -> ast.Call:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == name)


def test_ast_edits_insert_a_check_before_the_statement_and_replace_the_reduction() -> None:
    from specguard.fixes.ast_edits import around, enclosing_statement, indent_unit, insert_before, replace_node

    text = textwrap.dedent("""\
        class S:
            @classmethod
            def merge(cls, specs):
                x = 1; y = 2
                # build the merged spec
                return cls(
                    flag=any(
                        s.flag for s in specs  # é
                    ),
                )
        """).replace("\n", "\r\n")
    tree = ast.parse(text)
    method = tree.body[0].body[0]  # type: ignore[attr-defined]
    reduction = _call(tree, "any")
    statement = enclosing_statement(method, reduction)
    assert isinstance(statement, ast.Return)
    assert around(text, reduction) == ("            flag=", ",")
    unit = indent_unit(text, method)
    check = insert_before(
        text, statement, ["values = {s.flag for s in specs}", "if len(values) != 1:", unit + "raise ValueError"]
    )
    assert check is not None
    after = apply_edits(text, [check, replace_node(text, reduction, "values.pop()")])
    assert after == textwrap.dedent("""\
        class S:
            @classmethod
            def merge(cls, specs):
                x = 1; y = 2
                values = {s.flag for s in specs}
                if len(values) != 1:
                    raise ValueError
                # build the merged spec
                return cls(
                    flag=values.pop(),
                )
        """).replace("\n", "\r\n")


def test_ast_edits_refuse_what_a_line_before_could_not_see() -> None:
    from specguard.fixes.ast_edits import enclosing_statement, insert_before

    text = (
        "def f(groups, flags):\n    a = 1; b = any(flags)\n    return [any(g) for g in groups], max(flags, default=0)\n"
    )
    tree = ast.parse(text)
    function = tree.body[0]
    first_any, inner_any = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "any"]
    assert insert_before(text, enclosing_statement(function, first_any), ["x"]) is None  # shares its line
    assert enclosing_statement(function, inner_any) is None  # `g` exists only inside the comprehension


# ---- SG103: the padded count under FULL graphs, the real count of the call's own query otherwise ----------
# Here no definition of the helper is in the project (check_source), so only what the call itself says counts;
# tests/dataflow/test_sg103_fix_query.py checks against vLLM 0.28.0's definitions, tests/runtime runs the result.

SG103_HEAD = (
    "from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor\n"
    "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
    "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n"
)


def sg103(body: str, head: str = SG103_HEAD) -> str:
    method = textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 4)
    return f"{head}\n\nclass S(DraftModelSpeculator):\n{method}\n"


@pytest.mark.parametrize(
    ("body", "real"),
    [
        (  # the build is handed its query's start offsets: the offset at its request count
            """
            def propose(self, num_reqs, batch, d: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs,
                    num_tokens_padded=d.num_tokens,
                    query_start_loc_np=batch.query_start_loc_np,
                )
            """,
            "int(batch.query_start_loc_np[num_reqs])",
        ),
        (  # a uniform query: the requests times the width the call hands over
            """
            def propose(self, num_reqs):
                d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, num_reqs * self.k)
                n = d.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, num_query_per_req=self.k)
            """,
            "num_reqs * self.k",
        ),
        (  # one token per request: the request count itself
            """
            def decode(self, batch_desc: BatchExecutionDescriptor, reqs):
                return self._build_draft_attn_metadata(
                    num_reqs=reqs.n, num_tokens_padded=batch_desc.num_tokens, num_query_per_req=1
                )
            """,
            "reqs.n",
        ),
    ],
)
def test_sg103_fix_takes_the_count_of_the_query_the_call_builds_and_imports_the_mode(body: str, real: str) -> None:
    text = sg103(body)
    (finding,) = check_source(text)
    assert finding.fix is not None and finding.fix.applicability == "unsafe"
    after = fixed(text)
    assert "from vllm.config.compilation import CUDAGraphMode\n" in after
    assert " == CUDAGraphMode.FULL" in after and f"else {real}" in after
    assert check_source(after) == []  # the FULL test is the rule's own sanitizer
    compile(after, "fixed.py", "exec")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (  # the EAGLE-style decode step of the issue: the target batch's offsets are in scope, not this query's
            """
            def propose(self, input_batch, batch_desc: BatchExecutionDescriptor):
                num_reqs = input_batch.num_reqs
                target_tokens = int(input_batch.query_start_loc_np[-1])
                for step in range(1, self.k):
                    n = batch_desc.num_tokens
                    self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, step=step)
            """,
            "the call hands its build neither query start offsets",
        ),
        (
            """
            def propose(self, num_reqs):
                d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, 4)
                return self._build_draft_attn_metadata(num_tokens_padded=d.num_tokens, num_query_per_req=4)
            """,
            "the call does not say how many requests its query holds",
        ),
        (
            """
            def propose(self, num_reqs, qsl=None):
                d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, 4)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs, num_tokens_padded=d.num_tokens, query_start_loc_np=qsl
                )
            """,
            "`query_start_loc_np=` may be None here",
        ),
        (
            """
            def propose(self, batch_desc: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(
                    num_reqs=self.count(), num_tokens_padded=batch_desc.num_tokens, num_query_per_req=2
                )
            """,
            "`num_reqs=` is not a plain read",
        ),
        (
            """
            def propose(self, num_reqs, d: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=d.num_tokens, num_query_per_req=2)
            """,
            "passes arguments by position to a helper whose definition is not in the project",
        ),
        (
            """
            def _count(self, d):
                return d.num_tokens

            def propose(self, num_reqs, num_query_tokens):
                d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, num_query_tokens)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self._count(d))
            """,
            "the padded count is read in another function",
        ),
        (
            """
            def propose(self, num_reqs, num_query_tokens):
                d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, num_query_tokens)
                kw = {"num_tokens_padded": d.num_tokens}
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_query_per_req=1, **kw)
            """,
            "inside `**` arguments",
        ),
        (
            """
            def propose(self, num_reqs, d: BatchExecutionDescriptor, other: BatchExecutionDescriptor):
                n = d.num_tokens
                d = other
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, num_query_per_req=1)
            """,
            "`d` is assigned again between the read of its count and the call",
        ),
    ],
)
def test_sg103_offers_no_fix_unless_the_calls_own_query_count_is_known_and_says_why(body: str, why: str) -> None:
    findings = [f for f in check_source(sg103(body)) if f.code == "SG103"]
    assert findings and all(f.fix is None for f in findings)
    assert all("; no fix offered: " in f.message for f in findings) and why in findings[0].message


def test_sg103_fix_uses_the_modules_own_name_for_the_mode_and_refuses_a_clash() -> None:
    body = """
    def propose(self, num_reqs):
        d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, 4)
        return self._build_draft_attn_metadata(
            num_reqs=num_reqs, num_tokens_padded=d.num_tokens if num_reqs else 0, num_query_per_req=4
        )
    """
    aliased = sg103(body, SG103_HEAD + "from vllm.config import CUDAGraphMode as Mode\n")
    after = fixed(aliased)
    assert after.count("import") == aliased.count("import")  # nothing imported twice
    assert "                (d.num_tokens if num_reqs else 0)\n                if d.cg_mode == Mode.FULL\n" in after
    assert "                else num_reqs * 4\n" in after
    clash = sg103(body, SG103_HEAD + "from mymodes import Mode as CUDAGraphMode\n")
    (finding,) = check_source(clash)
    assert (
        finding.fix is None and "no fix offered: `CUDAGraphMode` means something else in this module" in finding.message
    )


def test_sg103_fix_splits_the_call_as_a_formatter_does_when_the_argument_shares_its_line() -> None:
    body = """
    def propose(self, n, d: BatchExecutionDescriptor, q):
        return self._build_attn_metadata(num_reqs=n, num_tokens_padded=d.num_tokens, query_start_loc_np=q)  # x
    """
    assert fixed(sg103(body)).endswith(
        "        return self._build_attn_metadata(\n"
        "            num_reqs=n,\n"
        "            num_tokens_padded=(\n"
        "                d.num_tokens if d.cg_mode == CUDAGraphMode.FULL else int(q[n])\n"
        "            ),\n"
        "            query_start_loc_np=q,\n"
        "        )  # x\n"
    )


def test_two_fixes_that_need_the_same_import_add_it_once_over_two_rounds() -> None:
    """Both insert the import at the same place, so they overlap: the second waits for the re-check, which finds
    the import there and the finding's message now naming lines one further down."""
    text = sg103("""
    def propose(self, num_reqs, num_query_tokens):
        d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, num_query_tokens)
        n = d.num_tokens
        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, num_query_per_req=2)

    def propose_again(self, num_reqs, num_query_tokens):
        d, _ = dispatch_cg_and_sync_dp(self.cg, num_reqs, num_query_tokens)
        n = d.num_tokens
        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n, num_query_per_req=2)
    """)
    first, second = check_source(text)
    assert "(line " in first.message and first.fix.overlaps([second.fix])  # type: ignore[union-attr, list-item]
    result = fix_text(text, [first, second], check_source, lambda f: True)
    assert len(result.applied) == 2 and result.refused == []
    assert result.text.count("from vllm.config.compilation import CUDAGraphMode\n") == 1
    assert check_source(result.text) == []
