"""CLASS 6: code the static evaluator runs (a speculator's propose near the padded build, an SG201 merge, the
served vLLM's config validation for `specguard config`) that builds huge values cheaply. The evaluator has a
step budget and a size cap checked before a value is built: memory and CPU must stay bounded, no traceback,
and the good sibling file's findings must still be reported."""

import textwrap
from pathlib import Path

from sg1harness import (
    DSPARK_DCP_YAML,
    SG101_BAD,
    assert_sane,
    check_json,
    config_codes,
    replace_file,
    run_cli,
    write,
)

PRELUDE = (
    "from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp\n"
    "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n\n"
)


def _speculator(body: str, use: str, helpers: str = "", methods: str = "") -> str:
    """A speculator whose padded count reaches the build only through the bomb's value (so it is evaluated)."""
    return (
        PRELUDE
        + textwrap.dedent(helpers)
        + "\n\nclass BombSpeculator(DraftModelSpeculator):\n"
        + textwrap.indent(textwrap.dedent(methods), "    ")
        + "\n    def propose(self, num_reqs, num_tokens):\n"
        + "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
        + textwrap.indent(textwrap.dedent(body), "        ")
        + f"        n = batch_desc.num_tokens + (0 if ({use}) is None else 0)\n"
        + "        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)\n"
    )


def _run(tmp_path: Path, home: Path, files: dict):
    proj = tmp_path / "proj"
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "good.py", SG101_BAD)
    # control: the same shape with small values must be evaluated to an SG103, or the bomb is never reached
    control = _speculator("L = [0, 1]\nL = [*L, *L]\nk = 10 ** 3\n", "len(L) + k").replace(
        "BombSpeculator", "ControlSpeculator"
    )
    write(proj / "pkg" / "control.py", control)
    for name, text in files.items():
        write(proj / "pkg" / name, text)
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj, timeout=150)
    assert_sane(res, rcs=(1,))
    good = [f for f in found if f[1] == "pkg/good.py"]
    assert [f[0] for f in good] == ["SG101"], f"the good sibling's SG101 was lost: {found}\n{res.describe()}"
    ctl = [f for f in found if f[1] == "pkg/control.py"]
    assert [f[0] for f in ctl] == ["SG103"], (
        f"cannot set up the attack: the small-valued control speculator gave {ctl}, so the bomb shape is not evaluated\n{res.describe()}"
    )
    return res, found


def test_unpacking_doubling_lists_and_dicts(tmp_path, home):
    """CLASS 6: in propose, `L = [*L, *L]` 48 times, `D = {**D, **{k + len(D): v ...}}` 40 times and `T = (*L, *L)`: each line doubles a container (2**51 elements if built). EXPECT: bounded (no RLIMIT hit), no traceback, exit 1 with the good file's SG101."""
    body = "L = [0, 1, 2, 3, 4, 5, 6, 7]\n" + "L = [*L, *L]\n" * 48
    body += "D = {i: i for i in range(64)}\n" + "D = {**D, **{k + len(D): v for k, v in D.items()}}\n" * 40
    body += "T = (*L, *L)\nS = {*L, *T}\n"
    _run(tmp_path, home, {"bomb.py": _speculator(body, "len(L) + len(D) + len(T) + len(S)")})


def test_nested_and_merged_comprehensions(tmp_path, home):
    """CLASS 6: in propose, a 4-deep nested list comprehension over range(1000) each (10**12 cells), a dict comprehension over a `{**A, **B}` merge of 20k-key dicts crossed with range(10**4), and a set comprehension over range(10**9). EXPECT: bounded, no traceback, exit 1 with the good file's SG101."""
    body = (
        "G = [[[[0 for a in range(1000)] for b in range(1000)] for c in range(1000)] for d in range(1000)]\n"
        "A = {i: i for i in range(2 * 10**4)}\n"
        "B = {-i: i for i in range(2 * 10**4)}\n"
        "M = {(a, b): a * b for a in {**A, **B} for b in range(10**4)}\n"
        "S = {x for x in range(10**9)}\n"
    )
    _run(tmp_path, home, {"bomb.py": _speculator(body, "len(G) + len(M) + len(S)")})


def test_builtins_over_huge_ranges(tmp_path, home):
    """CLASS 6: in propose, builtins evaluated on huge ranges: dict(zip(range(10**9), range(10**9))), sum/max of range(10**15), sorted/list/enumerate/map over range(10**9..10**10), dict.fromkeys(range(10**9)). EXPECT: bounded, no traceback, exit 1 with the good file's SG101."""
    body = (
        "Z = dict(zip(range(10**9), range(10**9)))\n"
        "s1 = sum(range(10**15))\n"
        "m1 = max(range(10**15))\n"
        "srt = sorted(range(10**9), reverse=True)\n"
        "lst = list(range(10**10))\n"
        "en = list(enumerate(range(10**9)))\n"
        "fk = dict.fromkeys(range(10**9))\n"
        "mp = list(map(str, range(10**9)))\n"
        "tot = len([x for x in reversed(range(10**12))])\n"
    )
    _run(
        tmp_path,
        home,
        {"bomb.py": _speculator(body, "len(Z) + s1 + m1 + len(srt) + len(lst) + len(en) + len(fk) + len(mp) + tot")},
    )


def test_string_and_bytes_multiplication_and_growth(tmp_path, home):
    """CLASS 6: in propose, "x" * 10**10, b"x" * 10**10, (0,) * 10**10, bytearray(10**10), "a".ljust/center(10**10), a format width of 10**10, " ".join(["x"] * 10**9), and `t = t + t` in a loop of 64 rounds. EXPECT: bounded, no traceback, exit 1 with the good file's SG101."""
    body = (
        's = "x" * (10 ** 10)\n'
        'b = b"x" * (10 ** 10)\n'
        "tp = (0,) * (10 ** 10)\n"
        "ba = bytearray(10 ** 10)\n"
        'u = "a".ljust(10 ** 10)\n'
        'c = "a".center(10 ** 10)\n'
        'w = "{:>{w}}".format("a", w=10 ** 10)\n'
        'f = f"{num_reqs:>{10 ** 10}}"\n'
        'j = " ".join(["x"] * (10 ** 9))\n'
        't = "ab"\n'
        "for _ in range(64):\n"
        "    t = t + t\n"
        "r = t.replace('a', t)\n"
    )
    _run(
        tmp_path,
        home,
        {
            "bomb.py": _speculator(
                body,
                "len(s) + len(b) + len(tp) + len(ba) + len(u) + len(c) + len(w) + len(f) + len(j) + len(t) + len(r)",
            )
        },
    )


def test_huge_integer_arithmetic(tmp_path, home):
    """CLASS 6: in propose, 10 ** 10 ** 9, 1 << 10**10, pow(7, 10**9), (10**5000) converted with str()/f-string/%d (CPython's 4300-digit limit raises ValueError inside the evaluator), int("9" * 5000), divmod of a 10**10**7. EXPECT: bounded, no traceback (no unhandled ValueError/OverflowError), exit 1 with the good file's SG101."""
    body = (
        "p = 10 ** 10 ** 9\n"
        "q = 1 << (10 ** 10)\n"
        "r = pow(7, 10 ** 9)\n"
        "big = 10 ** 5000\n"
        "s = str(big)\n"
        'fs = f"{big}"\n'
        'pc = "%d" % big\n'
        'i = int("9" * 5000)\n'
        "dm = divmod(10 ** 10 ** 7, 7)\n"
        "fl = float(10 ** 400)\n"
    )
    _run(tmp_path, home, {"bomb.py": _speculator(body, "p + q + r + len(s) + len(fs) + len(pc) + i + dm[0] + fl")})


def test_helper_fanout_and_mutual_recursion(tmp_path, home):
    """CLASS 6: the padded count flows through module helpers that each call the next level 12 times, 4 levels deep, each leaf looping range(10**6), plus mutually recursive helpers (ping/pong) and methods (self._a/self._b) that recurse forever. EXPECT: bounded, no traceback, exit 1 with the good file's SG101."""
    helpers = "def leaf(n):\n    acc = 0\n    for i in range(10**6):\n        acc = acc + i\n    return n + acc * 0\n\n"
    for lvl, nxt in (("h3", "leaf"), ("h2", "h3"), ("h1", "h2"), ("h0", "h1")):
        calls = " + ".join(f"{nxt}(n + {k})" for k in range(12))
        helpers += f"def {lvl}(n):\n    return {calls}\n\n"
    helpers += "def ping(n):\n    return pong(n + 1)\n\ndef pong(n):\n    return ping(n * 2)\n"
    methods = (
        "def _a(self, n):\n    return self._b(n + 1) + self._a(n)\n\ndef _b(self, n):\n    return self._a(n * 2)\n"
    )
    body = "k = h0(num_reqs) + ping(1) + self._a(1)\n"
    _run(tmp_path, home, {"bomb.py": _speculator(body, "k", helpers=helpers, methods=methods)})


def test_unbounded_loops_and_quadratic_copies(tmp_path, home):
    """CLASS 6: in propose, `while i < 10**12: i += 1`, a list that appends a copy of itself 10**9 times, and `acc = acc + acc` 10**6 times. EXPECT: bounded, no traceback, exit 1 with the good file's SG101."""
    body = (
        "i = 0\n"
        "while i < 10 ** 12:\n"
        "    i += 1\n"
        "acc = [0]\n"
        "for k in range(10 ** 9):\n"
        "    acc.append(acc[:])\n"
        "grow = [1]\n"
        "for k in range(10 ** 6):\n"
        "    grow = grow + grow\n"
    )
    _run(tmp_path, home, {"bomb.py": _speculator(body, "i + len(acc) + len(grow)")})


def test_sg201_merge_with_doubling_specs(tmp_path, home):
    """CLASS 6: a KV-cache spec `merge` (evaluated by SG201 on lists of specs) that doubles `specs` 48 times with [*specs, *specs] and builds a dict over the result before reducing the flag with any(). EXPECT: bounded, no traceback, exit 1 with the good file's SG101."""
    text = textwrap.dedent(
        """\
        from dataclasses import dataclass


        @dataclass(frozen=True)
        class AttentionSpec:
            block_size: int
            non_causal_multi_token_decode: bool = False


        @dataclass(frozen=True)
        class MLAAttentionSpec(AttentionSpec):
            @classmethod
            def merge(cls, specs):
                big = list(specs)
        """
    )
    text += "        big = [*big, *big]\n" * 48
    text += textwrap.indent(
        textwrap.dedent(
            """\
            index = {i: s for i, s in enumerate(big)}
            return cls(
                block_size=specs[0].block_size,
                non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in index.values()),
            )
            """
        ),
        "        ",
    )
    _run(tmp_path, home, {"kv_bomb.py": text})


# ----------------------------------------------------------------------------- specguard config on vLLM


def _plant_in_served(served: Path, rel: str, anchor: str, code: str):
    path = served / "vllm" / rel
    text = path.read_text()
    assert anchor in text, f"cannot set up the attack: {anchor!r} not in {rel}"
    line_start = text.index(anchor)
    indent = text[text.rindex("\n", 0, line_start) + 1 : line_start]
    end = text.index("\n", line_start) + 1
    planted = textwrap.indent(textwrap.dedent(code), indent)
    replace_file(path, (text[:end] + planted + text[end:]).encode())


def _config(tmp_path, home, served):
    cfg = write(tmp_path / "dspark-dcp.yaml", DSPARK_DCP_YAML)
    res = run_cli(["config", str(cfg), "--vllm-source", str(served), "--format", "json"], tmp_path, home, timeout=150)
    assert_sane(res, rcs=(1,))
    codes = config_codes(res)
    assert "CFG104" in codes, f"CFG104 (from SG201, untouched by the bomb) was lost: {codes}\n{res.describe()}"
    return res, codes


BOMB = (
    """\
_L = [0, 1, 2, 3, 4, 5, 6, 7]
"""
    + "_L = [*_L, *_L]\n" * 44
    + """\
_D = {i: i for i in range(64)}
"""
    + "_D = {**_D, **{k + len(_D): v for k, v in _D.items()}}\n" * 36
    + """\
_s = "x" * (10 ** 10)
_p = 10 ** 10 ** 9
_z = dict(zip(range(10 ** 9), range(10 ** 9)))
_t = sum(range(10 ** 15))
if len(_L) + len(_D) + len(_s) + _p + len(_z) + _t < 0:
    raise ValueError("never")
"""
)


def test_config_bomb_in_flashinfer_mla_builder(tmp_path, home, vllm_copy):
    """CLASS 6: specguard config on vLLM 0.33.0 whose FlashInferMLAMetadataBuilder.__init__ (evaluated for CFG102) first builds doubling lists/dicts, "x" * 10**10, 10**10**9, dict(zip(range(10**9), ...)) and sum(range(10**15)). EXPECT: bounded, no traceback, exit 1 with CFG104 still reported (CFG102 judged or said not judged)."""
    _plant_in_served(
        vllm_copy,
        "v1/attention/backends/mla/flashinfer_mla.py",
        "parallel_config = vllm_config.parallel_config",
        BOMB,
    )
    _config(tmp_path, home, vllm_copy)


def test_config_bomb_in_parallel_config_validation(tmp_path, home, vllm_copy, vllm_clean_verdict):
    """CLASS 6: specguard config on vLLM 0.33.0 whose ParallelConfig._validate_parallel_config (the DCP-size validation behind CFG105) starts with the same bombs. EXPECT: bounded, no traceback, exit 1, CFG104 still reported."""
    _plant_in_served(
        vllm_copy,
        "config/parallel.py",
        "def _validate_parallel_config(self) -> Self:",
        "    " + BOMB.replace("\n", "\n    ").rstrip() + "\n",
    )
    _config(tmp_path, home, vllm_copy)


def test_config_recursive_helpers_in_speculative_post_init(tmp_path, home, vllm_copy):
    """CLASS 6: specguard config on vLLM 0.33.0 whose SpeculativeConfig.__post_init__ first calls module helpers fanning out 12 calls per level, 4 levels deep, each leaf looping range(10**6), and a pair of mutually recursive helpers. EXPECT: bounded, no traceback, exit 1, CFG104 still reported."""
    path = vllm_copy / "vllm" / "config" / "speculative.py"
    text = path.read_text()
    helpers = "\n\ndef _sg_leaf(n):\n    acc = 0\n    for i in range(10**6):\n        acc = acc + i\n    return n + acc * 0\n\n"
    for lvl, nxt in (("_sg_h3", "_sg_leaf"), ("_sg_h2", "_sg_h3"), ("_sg_h1", "_sg_h2"), ("_sg_h0", "_sg_h1")):
        helpers += f"def {lvl}(n):\n    return " + " + ".join(f"{nxt}(n + {k})" for k in range(12)) + "\n\n"
    helpers += "def _sg_ping(n):\n    return _sg_pong(n + 1)\n\ndef _sg_pong(n):\n    return _sg_ping(n * 2)\n"
    replace_file(path, (text + helpers).encode())
    _plant_in_served(
        vllm_copy,
        "config/speculative.py",
        "def __post_init__(self):",
        "    if _sg_h0(1) + _sg_ping(1) < 0:\n        raise ValueError('never')\n",
    )
    _config(tmp_path, home, vllm_copy)
