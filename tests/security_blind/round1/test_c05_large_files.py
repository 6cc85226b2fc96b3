"""CLASS 5: one large or pathological file in a tree (hundreds of thousands of lines, one giant function,
deep expressions, 15 MB literals, files just under and over size caps). Per file: under 2 GiB of address
space and 60 s of CPU; no traceback; the findings of the good sibling files are still reported."""

from pathlib import Path

from sg1harness import (
    SG101_BAD,
    SG103_BAD,
    assert_sane,
    check_json,
    write,
)

HEADER = SG103_BAD  # a speculator module with a real SG103 finding, so the prefilter parses the file


def _tree(tmp_path: Path, big_name: str, big_text) -> Path:
    proj = tmp_path / "proj"
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "good.py", SG101_BAD)
    write(proj / "pkg" / big_name, big_text)
    return proj


def _sibling_ref(tmp_path):
    clean = tmp_path / "clean"
    write(clean / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(clean / "pkg" / "__init__.py", "")
    write(clean / "pkg" / "good.py", SG101_BAD)
    res, ref = check_json(["check", "pkg", "-n"], clean, tmp_path / "clean-home", clean)
    assert res.rc == 1 and ref, res.describe()
    return ref


def _run_big(tmp_path, home, proj, big_names, own_codes=("SG103",)):
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj, timeout=150)
    assert_sane(res, rcs=(1,))
    ref = _sibling_ref(tmp_path)
    good = [f for f in found if f[1] == "pkg/good.py"]
    assert good == ref, f"the good sibling's findings were lost or changed: {good} vs {ref}\n{res.describe()}"
    for name in big_names:
        own = [f for f in found if f[1] == f"pkg/{name}" and (f[0] in own_codes or f[0] == "SG000")]
        said = [ln for ln in res.err.splitlines() if name in ln]
        assert own or said, (
            f"{name} vanished silently: neither its own finding ({own_codes}), nor SG000, nor a note\n{res.describe()}"
        )
    return res, found


def test_500k_lines_of_small_functions(tmp_path, home):
    """CLASS 5: a speculator module of ~500k lines (250k small module functions after a real SG103), beside a good file with SG101. EXPECT: no RLIMIT (2 GiB, 60 s) hit, no traceback, exit 1, the good file's SG101 reported, the big file reported (SG103 or SG000 or a note)."""
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(250_000))
    proj = _tree(tmp_path, "big.py", HEADER + "\n" + body)
    _run_big(tmp_path, home, proj, ["big.py"])


def test_one_giant_propose_function(tmp_path, home):
    """CLASS 5: one speculator `propose` of 400k statements before the padded build (the function the rules parse with libcst and evaluate). EXPECT: no RLIMIT hit, no traceback, exit 1, the good file's SG101 reported, the big file reported or named."""
    stmts = "".join(f"        v{i} = num_reqs + {i}\n" for i in range(400_000))
    text = (
        "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n"
        "class GiantSpeculator(DraftModelSpeculator):\n"
        "    def propose(self, num_reqs, num_tokens):\n"
        "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
        + stmts
        + "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)\n"
    )
    proj = _tree(tmp_path, "giant.py", text)
    _run_big(tmp_path, home, proj, ["giant.py"])


def test_deep_binop_expression_in_propose(tmp_path, home):
    """CLASS 5: inside propose, `n = batch_desc.num_tokens + 0 + 0 + ...` with 200k terms (a left-nested BinOp 200k deep: recursion in ast conversion, visitors and the evaluator). EXPECT: no crash/signal, no RLIMIT hit, no traceback, exit 1, the good file's SG101 reported, the deep file reported or named."""
    expr = "batch_desc.num_tokens" + " + 0" * 200_000
    text = (
        "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n"
        "class DeepSpeculator(DraftModelSpeculator):\n"
        "    def propose(self, num_reqs, num_tokens):\n"
        "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
        f"        n = {expr}\n"
        "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)\n"
    )
    proj = _tree(tmp_path, "deep.py", text)
    _run_big(tmp_path, home, proj, ["deep.py"])


def test_deep_attribute_and_call_chains(tmp_path, home):
    """CLASS 5: inside propose, an attribute chain `self.a.a.a...` 150k long and a call chain `f()()()...` 150k long (left-recursive primaries: no parenthesis limit applies). EXPECT: no crash/signal, no RLIMIT hit, no traceback, exit 1, the good file's SG101 reported, the deep file reported or named."""
    attr = "self" + ".a" * 150_000
    calls = "num_reqs" + "()" * 150_000
    text = (
        "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n"
        "class ChainSpeculator(DraftModelSpeculator):\n"
        "    def propose(self, num_reqs, num_tokens):\n"
        "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
        f"        x = {attr}\n"
        f"        y = {calls}\n"
        "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)\n"
    )
    proj = _tree(tmp_path, "chain.py", text)
    _run_big(tmp_path, home, proj, ["chain.py"])


def test_deep_nesting_shapes_each_in_own_file(tmp_path, home):
    """CLASS 5: four speculator modules, each with one pathological nesting in propose: 100k `not` operators, 5000 nested lambdas, 199 nested lists, 10k nested parentheses (over the parser's limit). EXPECT: no crash/signal, no RLIMIT hit, no traceback, exit 1, the good file's SG101 reported, each deep file reported (SG103/SG000) or named in a note."""
    shapes = {
        "nots.py": "not " * 100_000 + "num_reqs",
        "lambdas.py": "lambda: " * 5000 + "num_reqs",
        "lists.py": "[" * 199 + "num_reqs" + "]" * 199,
        "parens.py": "(" * 10_000 + "num_reqs" + ")" * 10_000,
    }
    proj = _tree(tmp_path, "placeholder.py", "")
    (proj / "pkg" / "placeholder.py").unlink()
    for name, expr in shapes.items():
        cls = name.split(".")[0].capitalize() + "Speculator"
        write(
            proj / "pkg" / name,
            "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
            "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n"
            f"class {cls}(DraftModelSpeculator):\n"
            "    def propose(self, num_reqs, num_tokens):\n"
            "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
            f"        z = {expr}\n"
            "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)\n",
        )
    _run_big(tmp_path, home, proj, list(shapes))


def test_15mb_string_literal(tmp_path, home):
    """CLASS 5: a speculator module (real SG103) that also holds a 15 MB string literal at module level. EXPECT: no RLIMIT hit, no traceback, exit 1, the good file's SG101 reported, the big file reported or named."""
    text = HEADER + "\nBLOB = '" + "x" * (15 * 1024 * 1024) + "'\n"
    proj = _tree(tmp_path, "blob.py", text)
    _run_big(tmp_path, home, proj, ["blob.py"])


def test_15mb_list_literal(tmp_path, home):
    """CLASS 5: a speculator module (real SG103) with a 15 MB list literal `[0, 0, ...]` (~5M elements, one AST node each). EXPECT: no RLIMIT hit (2 GiB), no traceback, exit 1, the good file's SG101 reported, the big file reported or named."""
    n = (15 * 1024 * 1024) // 3
    text = HEADER + "\nTABLE = [" + "0, " * n + "]\n"
    proj = _tree(tmp_path, "table.py", text)
    _run_big(tmp_path, home, proj, ["table.py"])


def test_15mb_dict_literal_inside_propose(tmp_path, home):
    """CLASS 5: a 15 MB dict literal `{0: 0, 1: 1, ...}` written INSIDE the speculator's propose, so the evaluated and libcst-parsed function holds it. EXPECT: no RLIMIT hit, no traceback, exit 1, the good file's SG101 reported, the big file reported or named."""
    items = []
    size = 0
    i = 0
    while size < 15 * 1024 * 1024:
        s = f"{i}: {i}, "
        items.append(s)
        size += len(s)
        i += 1
    text = (
        "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
        "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n"
        "class DictSpeculator(DraftModelSpeculator):\n"
        "    def propose(self, num_reqs, num_tokens):\n"
        "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
        "        table = {" + "".join(items) + "}\n"
        "        n = batch_desc.num_tokens + len(table) * 0\n"
        "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)\n"
    )
    proj = _tree(tmp_path, "dict.py", text)
    _run_big(tmp_path, home, proj, ["dict.py"])


def _padded_file(cls: str, size: int) -> bytes:
    head = SG101_BAD.replace("MyDraftSpeculator", cls).encode()
    line = b"# " + b"p" * 97 + b"\n"  # 100 bytes
    need = size - len(head)
    body = line * (need // len(line))
    rest = need - len(body)
    tail = (b"#" + b"q" * (rest - 2) + b"\n") if rest >= 2 else (b"\n" * rest)
    data = head + body + tail
    assert len(data) == size, (len(data), size)
    return data


def _sizes_test(tmp_path, home, sizes):
    proj = _tree(tmp_path, "placeholder.py", "")
    (proj / "pkg" / "placeholder.py").unlink()
    names = []
    for i, size in enumerate(sizes):
        name = f"s{i}_{size}.py"
        write(proj / "pkg" / name, _padded_file(f"Sized{i}Speculator", size))
        names.append(name)
    _run_big(tmp_path, home, proj, names, own_codes=("SG101",))


def test_sizes_around_1_2_4_mib(tmp_path, home):
    """CLASS 5: speculator modules with a real SG101, padded with comments to 1 MiB -1/+1, 2 MiB -1/+1, 4 MiB -1/+1 bytes (guessed caps). EXPECT: exit 1, no RLIMIT hit, the good file's SG101, and every sized file either reported (SG101 or SG000) or named in a note, never silently dropped."""
    M = 1024 * 1024
    _sizes_test(tmp_path, home, [M - 1, M + 1, 2 * M - 1, 2 * M + 1, 4 * M - 1, 4 * M + 1])


def test_sizes_around_8_10_16_mib(tmp_path, home):
    """CLASS 5: the same around 8 MiB, 10 MB and 16 MiB (-1/+1 bytes). EXPECT: exit 1, no RLIMIT hit, the good file's SG101, each sized file reported or named, never silently dropped."""
    M = 1024 * 1024
    _sizes_test(tmp_path, home, [8 * M - 1, 8 * M + 1, 10**7 - 1, 10**7 + 1, 16 * M - 1, 16 * M + 1])


def test_sizes_far_over_any_cap(tmp_path, home):
    """CLASS 5: speculator modules of 32 MiB + 1, 64 MiB + 1 and 128 MiB + 1 bytes (comments after a real SG101). EXPECT: exit 1, no RLIMIT hit (2 GiB), the good file's SG101, each huge file reported (SG101/SG000) or named in a note."""
    M = 1024 * 1024
    _sizes_test(tmp_path, home, [32 * M + 1, 64 * M + 1, 128 * M + 1])
