"""Class 5: single large or pathological files, each beside the good files with real findings."""

import json

from sg2harness import (
    GOOD_FINDINGS,
    SG101_SRC,
    SG201_SRC,
    assert_good_findings,
    assert_no_crash,
    make_project,
    run_cli,
)

MENTION = b"from vllm.v1.worker.gpu.attn_utils import build_attn_metadata\nfrom x import DraftModelSpeculator\n"


def check_json(root, *extra):
    return run_cli(["check", ".", "--output-format", "json", *extra], root)


def test_three_million_lines(work):
    """CLASS 5: `big.py` names pack names and then has 3,000,000 short lines (`x0 = build_attn_metadata`, ...). EXPECT: within 2 GiB and 60 s CPU, no traceback; the good files' three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    with open(root / "pkg" / "big.py", "wb") as f:
        f.write(MENTION)
        f.writelines(b"x%d = build_attn_metadata\n" % i for i in range(3_000_000))
    res = check_json(root)
    assert_good_findings(res, root)


def test_deep_bracket_nesting(work):
    """CLASS 5: files naming pack names with pathological nesting: 200,000 nested parentheses; 5,000 nested lists inside a speculator's method; 99 nested `if` blocks; 3,000 nested lambdas. EXPECT: no crash of a native parser (no signal), no traceback; each such file is at most SG000 or a note; the good files' findings are reported (rc 1)."""
    root = make_project(work / "proj")
    files = {
        "pkg/parens.py": MENTION + b"x = " + b"(" * 200_000 + b"1" + b")" * 200_000 + b"\n",
        "pkg/lists.py": MENTION
        + b"class S(DraftModelSpeculator):\n    def propose(self):\n        x = "
        + b"[" * 5000
        + b"]" * 5000
        + b"\n        return build_attn_metadata(num_tokens=x)\n",
        "pkg/ifs.py": MENTION
        + b"".join(b" " * i + b"if x:\n" for i in range(99))
        + b" " * 99
        + b"build_attn_metadata()\n",
        "pkg/lambdas.py": MENTION + b"f = " + b"lambda: " * 3000 + b"build_attn_metadata\n",
    }
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    res = check_json(root)
    assert_good_findings(res, root)


def test_sparse_file_of_sixteen_gib(work):
    """CLASS 5: `huge.py` is a 16 GiB sparse file that begins with pack names (the rest NUL bytes). EXPECT: it is not read whole (within 2 GiB of address space and 60 s CPU), no traceback; a note or SG000 for it, and the good files' three findings (rc 1)."""
    root = make_project(work / "proj")
    with open(root / "pkg" / "huge.py", "wb") as f:
        f.write(MENTION)
        f.truncate(16 * 1024**3)
    res = check_json(root)
    assert_good_findings(res, root)


def test_one_line_of_fifty_megabytes(work):
    """CLASS 5: `longline.py` holds a single 50 MB line: a string literal full of pack names inside a speculator's method. EXPECT: within 2 GiB / 60 s CPU, no traceback; the good files' three findings (rc 1)."""
    root = make_project(work / "proj")
    payload = b"build_attn_metadata num_tokens_padded " * (50 * 1024 * 1024 // 38)
    (root / "pkg" / "longline.py").write_bytes(
        MENTION + b"class S(DraftModelSpeculator):\n    def propose(self):\n        return '" + payload + b"'\n"
    )
    res = check_json(root)
    assert_good_findings(res, root)


def test_six_thousand_speculator_classes(work):
    """CLASS 5: `many.py` defines 6,000 small speculator classes (each `propose` calls `build_attn_metadata`, under the token budget of 250,000). EXPECT: within 2 GiB and 60 s CPU, no traceback; the good files' three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    head = b"from vllm.v1.worker.gpu.attn_utils import build_attn_metadata\nfrom vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n"
    body = b"".join(
        b"class S%d(DraftModelSpeculator):\n    def propose(self, n):\n        return build_attn_metadata(num_reqs=n)\n"
        % i
        for i in range(6000)
    )
    (root / "pkg" / "many.py").write_bytes(head + body)
    res = check_json(root)
    assert_good_findings(res, root)


def test_line_separators_and_mixed_endings_fix(work):
    """CLASS 5: the fixable merge file has, before the finding, U+2028 and U+0085 inside a comment and a string, a form feed line, a lone CR line ending and CRLF lines (Python's tokenizer and `str.splitlines` disagree on these). EXPECT: the finding is reported at the line Python's `ast` gives; after `--fix` the file still compiles, its SG201 is gone, and every one of those odd characters is still there byte for byte."""
    root = make_project(work / "proj")
    lines = SG201_SRC.split("\n")
    odd = (
        "# comment with \u2028 line separator and \u0085 next-line\r\n"
        "NOTE = 'string \u2028 with \u0085 separators'\r\n"
        "\x0c\n"
        "A = 1\rB = 2\n"
    )
    text = lines[0] + "\n" + odd + "\n".join(lines[1:])
    path = root / "pkg" / "merge.py"
    path.write_bytes(text.encode())
    import ast

    tree = ast.parse(text)
    merge_ret = [n for n in ast.walk(tree) if isinstance(n, ast.keyword) and n.arg == "non_causal_multi_token_decode"]
    want_row = merge_ret[0].value.lineno
    res = run_cli(["check", "pkg/merge.py", "--output-format", "json", "-n"], root)
    assert_no_crash(res, (1,))
    rows = [f["location"]["row"] for f in json.loads(res.out) if f["code"] == "SG201"]
    assert rows == [want_row], (
        f"SG201 reported at {rows}, Python's ast puts the flagged value on line {want_row}: {res!r}"
    )
    fix = run_cli(["check", "pkg/merge.py", "--fix", "-n"], root)
    assert_no_crash(fix, (0, 1))
    data = path.read_bytes()
    compile(data, "merge.py", "exec")
    assert odd.encode() in data, f"the odd lines before the finding changed under the fix:\n{data!r}"
    after = run_cli(["check", "pkg/merge.py", "--output-format", "json", "-n"], root)
    assert_no_crash(after, (0, 1))
    assert not [f for f in json.loads(after.out) if f["code"] == "SG201"], f"SG201 still there after --fix: {after!r}"


def test_nul_bytes_bom_and_nfkc_identifiers(work):
    """CLASS 5: beside the good files: `nul.py` (pack names, then NUL bytes mid-line), `bom.py` (a UTF-8 BOM before the SG101 example), `nfkc.py` (the SG101 example whose call is spelled `ｂｕｉｌｄ_attn_metadata` in fullwidth letters, which Python's NFKC normalisation makes the very same name). EXPECT: SG000 for nul.py, SG101 for bom.py at line 8 and for nfkc.py at line 8, and the three good findings; no traceback."""
    root = make_project(work / "proj")
    (root / "pkg" / "nul.py").write_bytes(MENTION + b"x = 1\x00\x00\x00 build_attn_metadata\n")
    (root / "pkg" / "bom.py").write_bytes(b"\xef\xbb\xbf" + SG101_SRC.replace("MyDraftSpeculator", "BomSpec").encode())
    nfkc = SG101_SRC.replace("MyDraftSpeculator", "NfkcSpec").replace(
        "return build_attn_metadata(", "return \uff42\uff55\uff49\uff4c\uff44_attn_metadata("
    )
    (root / "pkg" / "nfkc.py").write_text(nfkc, encoding="utf-8")
    res = check_json(root)
    expected = set(GOOD_FINDINGS) | {("pkg/bom.py", "SG101", 8), ("pkg/nfkc.py", "SG101", 8)}
    assert_good_findings(res, root, expected)
    codes = {(f["filename"].rsplit("/", 1)[-1], f["code"]) for f in json.loads(res.out)}
    assert ("nul.py", "SG000") in codes, f"no SG000 for the file holding NUL bytes: {res!r}"
