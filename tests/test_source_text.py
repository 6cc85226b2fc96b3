"""Source text as CPython reads it: its lines (only CRLF, CR and LF end one) and its names (NFKC, PEP 3131).

`str.splitlines` ends lines at a form feed, U+2028, U+0085 and more, and counting LF alone misses a lone CR:
either put a finding or a fix's edit on another line than `ast` gives. And Python compares identifiers after NFKC
normalisation, so a call spelled in fullwidth letters is the very name a rule looks for (issue 26, item 5).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from specguard.lines import line_starts, position, source_lines
from specguard.program.sparse import sparse_source

# Every way a character other than CR and LF can look like a line break, and a lone CR that is one.
ODD = "# comment \u2028 and \u0085 here\r\nNOTE = 'string \u2028 with \u0085 and \u000b'\r\n\x0c\nA = 1\rB = 2\n"
MERGE = """\
from dataclasses import dataclass
{odd}

@dataclass(frozen=True)
class MLAAttentionSpec:
    non_causal_multi_token_decode: bool = False

    @classmethod
    def merge(cls, specs):
        return cls(
            non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
        )
"""
SG101 = """\
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class WideSpeculator(DraftModelSpeculator):
    def propose(self, num_reqs):
        return {call}(num_reqs=num_reqs)
"""


def _check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "check", "--no-cache", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "XDG_CACHE_HOME": str(root / "xdg")},
    )


def test_lines_are_numbered_as_the_tokenizer_numbers_them() -> None:
    text = MERGE.format(odd=ODD)
    lines = source_lines(text)
    assert "".join(lines) == text
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):  # the line `ast` gives holds the name at its column
            assert lines[node.lineno - 1].encode()[node.col_offset :].startswith(node.id.encode())
    assert line_starts("a\rb\r\nc\nd") == [0, 2, 5, 7]
    assert position("a\rb\r\nc\nd", 6) == (3, 2)


def test_the_sparse_source_keeps_every_line_after_a_lone_cr() -> None:
    """A blanked line after a lone CR is not its bare LF: CR + LF would join two lines into one CRLF."""
    text = "x = 1\ry = 2\ndef f():\n    return g()\n"
    sparse = sparse_source(text, [(3, 4)], ("g",))
    assert source_lines(sparse)[2:] == source_lines(text)[2:] and len(source_lines(sparse)) == 4


def test_a_fix_after_odd_line_breaks_lands_on_its_line_and_keeps_them(tmp_path: Path) -> None:
    text = MERGE.format(odd=ODD)
    (tmp_path / "merge.py").write_bytes(text.encode())
    want = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.keyword) and n.arg != "frozen").lineno
    found = json.loads(_check(tmp_path, "merge.py", "--output-format", "json").stdout)
    assert [(f["code"], f["location"]["row"], f["fix"] is not None) for f in found] == [("SG201", want, True)]
    fixed = _check(tmp_path, "merge.py", "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    data = (tmp_path / "merge.py").read_bytes()
    compile(data, "merge.py", "exec")
    assert ODD.encode() in data and b"raise AssertionError" in data


def test_a_name_in_fullwidth_letters_is_the_name_python_reads(tmp_path: Path) -> None:
    wide = "\uff42\uff55\uff49\uff4c\uff44_attn_metadata"  # NFKC: build_attn_metadata
    (tmp_path / "wide.py").write_text(SG101.format(call=wide), encoding="utf-8")
    out = _check(tmp_path, "wide.py")
    assert out.returncode == 1 and "wide.py:7:16: SG101 `WideSpeculator.propose` calls `build_attn_metadata`" in (
        out.stdout
    ), out.stdout + out.stderr
