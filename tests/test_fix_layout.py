"""Fixes respect the analyzed project's line length, and leave a formatted file formatted (issue #17 item 3).

ruff format is the oracle here (a test dependency; specguard itself lays lines out without it): a file ruff has
formatted at a line length, fixed by specguard at that line length, is unchanged by ruff format again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_source
from specguard.fixes.apply import fix_text
from specguard.rules import all_rules

WIDTHS = [60, 79, 88, 100, 120]

SG103_HEAD = """\
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class S(DraftModelSpeculator):
"""

SHAPES = {
    "sg103 argument on its own line": SG103_HEAD
    + """
    def propose(self, num_reqs, batch, batch_desc: BatchExecutionDescriptor):
        draft_attn_metadata = self._build_draft_attn_metadata(
            num_reqs=num_reqs,
            num_tokens_padded=batch_desc.num_tokens,  # the padded count
            query_start_loc_np=batch.query_start_loc_np,
        )
        return draft_attn_metadata
""",
    "sg103 arguments sharing a line": SG103_HEAD
    + """
    def propose(self, n, d: BatchExecutionDescriptor, q):
        return self._build_attn_metadata(num_reqs=n, num_tokens_padded=d.num_tokens, query_start_loc_np=q)
""",
    "sg103 by position, the helper's defaults": """
class DraftModelSpeculator:
    def _build_attn_metadata(self, num_reqs, num_tokens_padded, num_query_per_req=1, query_start_loc_np=None):
        return None


class S(DraftModelSpeculator):
    def step(self, reqs, batch_desc: BatchExecutionDescriptor):
        return self._build_attn_metadata(reqs.count, batch_desc.num_tokens)
""",
    "sg201 long flag, asserts": """
class MLAAttentionSpec:
    @classmethod
    def merge(cls, specs):
        assert len({s.block_size for s in specs}) == 1, "one block size per group"
        return cls(
            block_size=specs[0].block_size,
            non_causal_multi_token_decode=any(spec.non_causal_multi_token_decode for spec in specs),
        )
""",
    "sg201 short flag, one line": """
class TinySpec:
    @classmethod
    def merge(cls, specs):
        return cls(non_causal_multi_token_decode=all(s.non_causal_multi_token_decode for s in specs))
""",
    "sg201 in a branch, through a local": """
class BranchSpec:
    @classmethod
    def merge(cls, specs):
        if len(specs) > 1:
            merged_flag_of_the_whole_group = max([layer.non_causal_multi_token_decode for layer in specs])
        else:
            merged_flag_of_the_whole_group = specs[0].non_causal_multi_token_decode
        return cls(non_causal_multi_token_decode=merged_flag_of_the_whole_group)
""",
}


def ruff_format(text: str, width: int) -> str:
    args = [sys.executable, "-m", "ruff", "format", f"--line-length={width}", "--no-cache", "-"]
    return subprocess.run(args, input=text, capture_output=True, text=True, check=True).stdout


def fixed_at(text: str, width: int) -> tuple[str, int]:
    def check(t: str) -> list:  # type: ignore[type-arg]
        return check_source(t, line_length=width)

    result = fix_text(text, check(text), check, lambda f: True)
    return result.text, len(result.applied)


SOURCES = {**{f"{c} example": textwrap.dedent(r.bad) for c, r in all_rules().items() if r.fixed}, **SHAPES}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_formatted_file_stays_formatted_after_every_fix(name: str, width: int) -> None:
    formatted = ruff_format(SOURCES[name], width)
    after, applied = fixed_at(formatted, width)
    assert applied > 0 or width < 88, "the fix is offered at the usual line lengths"
    assert ruff_format(after, width) == after, after
    assert all(len(line) <= width for line in set(after.splitlines()) - set(formatted.splitlines()) if "#" not in line)


@pytest.mark.parametrize("code", [c for c, rule in all_rules().items() if rule.fix_availability != "never"])
def test_a_form_feed_in_a_comment_does_not_change_how_a_fix_is_laid_out(code: str) -> None:
    """CPython ends no line at a form feed (`str.splitlines` does): a fix that measured its line by the latter read
    the line above it, and SG104 then left a call split that now fits."""
    bad = textwrap.dedent(all_rules()[code].bad)
    at = bad.index("\n", bad.index("def ")) + 1  # the first line of the first function's body
    indent = bad[at : len(bad) - len(bad[at:].lstrip(" "))]

    def fixed(separator: str) -> str:
        text = bad[:at] + f"{indent}# the draft{separator} step {'#' * 70}\n" + bad[at:]
        return fix_text(text, check_source(text), check_source, lambda f: True).text

    assert fixed("\x0c") == fixed(" ").replace("draft  step", "draft\x0c step")


def test_sg103_fix_that_cannot_be_laid_out_is_not_offered_and_says_why() -> None:
    text = SG103_HEAD + (
        "    def propose(self, n, d: BatchExecutionDescriptor, q):\n"
        "        return wrap(self._build_attn_metadata(num_reqs=n, num_tokens_padded=d.num_tokens, "
        "query_start_loc_np=q))\n"
    )
    (finding,) = check_source(text, line_length=88)
    assert (
        finding.fix is None
        and "no fix offered: the rewritten argument cannot be laid out within the line length" in (finding.message)
    )
    (wide,) = check_source(text, line_length=200)
    assert wide.fix is not None  # at a line length it fits, the same call is fixed in place


# ---- which line length: ruff's configuration nearest to each file ------------------------------------------

SPEC = """\
class MLAAttentionSpec:
    @classmethod
    def merge(cls, specs):
        return cls(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs))
"""


def _fixed_lines(cli, root: Path, relative: str) -> list[str]:  # type: ignore[no-untyped-def]
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPEC)
    out = cli("check", relative, "--fix", "--no-cache", cwd=root)
    assert "(1 fixed, 0 remaining)" in out.stdout, out.stdout + out.stderr
    return path.read_text().splitlines()


def test_the_nearest_ruff_configuration_sets_the_line_length(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.ruff]\nline-length = 120\n')
    (tmp_path / "narrow").mkdir()
    (tmp_path / "narrow" / "ruff.toml").write_text("line-length = 60\n")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "pyproject.toml").write_text('[project]\nname = "q"\n')  # no [tool.ruff]: look further up
    wide = _fixed_lines(cli, tmp_path, "wide.py")
    assert max(map(len, wide)) > 88 and max(map(len, wide)) <= 120
    assert max(map(len, _fixed_lines(cli, tmp_path, "plain/spec.py"))) > 88
    narrow = _fixed_lines(cli, tmp_path, "narrow/spec.py")
    assert max(len(line) for line in narrow if "SG201" not in line and "= any(" not in line) <= 60


def test_without_a_ruff_configuration_fixes_are_laid_out_at_88(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = _fixed_lines(cli, tmp_path, "spec.py")
    assert max(map(len, lines)) <= 88 and len(lines) > len(SPEC.splitlines()) + 3


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ("[tool.ruff\nline-length = 100\n", "is not valid TOML"),
        ("[tool.ruff]\nline-length = 'wide'\n", "line-length 'wide' is not an integer from 1 to 320"),
    ],
)
def test_an_unreadable_ruff_configuration_means_88_and_one_note(cli, tmp_path: Path, config: str, why: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "spec.py").write_text(SPEC)
    out = cli("check", "spec.py", "--fix", "--no-cache", cwd=tmp_path)
    assert "(1 fixed, 0 remaining)" in out.stdout, out.stdout + out.stderr
    assert max(map(len, (tmp_path / "spec.py").read_text().splitlines())) <= 88
    notes = [line for line in out.stderr.splitlines() if line.startswith("specguard: note: ")]
    assert len(notes) == 1 and why in notes[0] and "laid out at 88 columns" in notes[0], out.stderr


def test_a_ruff_configuration_above_the_checkouts_root_is_not_read(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A shared folder holding the checkout (a world-writable /tmp) does not choose how fixes are laid out, even with
    a ruff.toml that is ours: the search stops at the folder holding `.git`."""
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    unplanted = _fixed_lines(cli, checkout, "spec.py")
    (tmp_path / "ruff.toml").write_text("line-length = 60\n")
    (checkout / "pkg").mkdir()
    (checkout / "pkg" / "ruff.toml").write_text("line-length = 60\n")
    assert _fixed_lines(cli, checkout, "pkg/spec.py") != unplanted, "a ruff.toml inside the checkout counts"
    assert _fixed_lines(cli, checkout, "spec.py") == unplanted


def test_a_ruff_configuration_others_may_have_written_is_not_read_and_said(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.ruff]\nline-length = 120\n')
    planted = tmp_path / "pkg" / "ruff.toml"
    planted.parent.mkdir()
    planted.write_text("line-length = 30\n")
    planted.chmod(0o666)
    (tmp_path / "pkg" / "spec.py").write_text(SPEC)
    out = cli("check", "pkg/spec.py", "--fix", "--no-cache", cwd=tmp_path)
    assert "(1 fixed, 0 remaining)" in out.stdout, out.stdout + out.stderr
    lines = (tmp_path / "pkg" / "spec.py").read_text().splitlines()
    assert max(map(len, lines)) > 88, "the planted ruff.toml was read, or the one above it was not"
    notes = [line for line in out.stderr.splitlines() if "ruff.toml" in line]
    assert notes == [
        f"specguard: note: {planted} was not read (anyone may write it (mode 0666)): someone else may have written "
        "it; fixes are laid out by the ruff configuration above it, if any"
    ], out.stderr
