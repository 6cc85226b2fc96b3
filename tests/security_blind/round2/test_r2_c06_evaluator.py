"""Class 6: code the evaluator runs that builds huge values cheaply (merged dicts, unpacking, comprehensions,
repetition, recursion, generators, big-integer arithmetic), inside a speculator's `propose` next to a flagged
call, and inside the served vLLM's config code for `specguard config`."""

import textwrap

from sg2harness import (
    DSPARK_DCP_YAML,
    GOOD_FINDINGS,
    assert_good_findings,
    assert_no_crash,
    config_codes,
    copy_vllm,
    make_project,
    run_cli,
)

HEAD = """\
import itertools
import math
import functools
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

"""


def bomb_project(work, body, prelude="", base="DraftModelSpeculator"):
    """pkg/bomb.py: a speculator whose propose runs `body`, then hands its result to the sink (SG101) and a padded
    count to the shared helper (SG103), beside the three good files."""
    src = (
        HEAD
        + textwrap.dedent(prelude)
        + f"\nclass BombSpeculator({base}):\n    def propose(self, num_reqs, num_tokens):\n"
        + "        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)\n"
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + "        self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)\n"
        + "        return build_attn_metadata(attn_groups=self.attn_groups, num_reqs=num_reqs, x=x)\n"
    )
    compile(src, "bomb.py", "exec")
    return make_project(work / "proj", {"pkg/bomb.py": src})


def run_bomb(work, body, prelude="", base="DraftModelSpeculator"):
    root = bomb_project(work, body, prelude, base)
    res = run_cli(["check", ".", "--output-format", "json", "-v"], root)
    assert_good_findings(res, root)
    return res


def test_doubling_merged_dicts_and_unpacking(work):
    """CLASS 6: propose doubles a dict 64 times with `{**d, **{k + 'x': v ...}}`, merges it with itself, unpacks it into a call and into a list (`[*d, *d]`), next to SG101/SG103 calls. EXPECT: within 2 GiB and 60 s CPU, no traceback; the good files' three findings are reported (rc 1)."""
    run_bomb(
        work,
        """\
        d = {'k': num_reqs}
        for i in range(64):
            d = {**d, **{k + 'x': v for k, v in d.items()}}
        e = {**d, **d, **d}
        f = dict(**e)
        g = [*d, *e, *f]
        x = len(g) + len({**f})
        """,
    )


def test_string_list_repetition(work):
    """CLASS 6: propose builds `'x' * 10**12`, `[0] * 10**12`, `[[0] * 10**6] * 10**6`, `bytes(10**12)`, `'ab'.ljust(10**12)`, `'-'.join(['x'] * 10**9)`, `'a\\tb'.expandtabs(10**12)`, `f"{'':>{10**12}}"`, `'%*d' % (10**12, 1)` and `'x'.zfill(10**12)`. EXPECT: within 2 GiB and 60 s CPU, no traceback; the good files' three findings (rc 1)."""
    run_bomb(
        work,
        """\
        a = 'x' * 10**12
        b = [0] * 10**12
        c = [[0] * 10**6] * 10**6
        d = bytes(10**12)
        e = 'ab'.ljust(10**12)
        f = '-'.join(['x'] * 10**9)
        g = 'a\\tb'.expandtabs(10**12)
        h = f"{'':>{10**12}}"
        i = '%*d' % (10**12, 1)
        j = 'x'.zfill(10**12)
        x = len(a) + len(b) + len(c) + len(d) + len(e) + len(f) + len(g) + len(h) + len(i) + len(j)
        """,
    )


def test_big_integer_arithmetic(work):
    """CLASS 6: propose computes `2 ** 2 ** 40`, `10 ** 10 ** 8`, `pow(3, 10**9)`, `1 << 10**10`, `str(2 ** 100000)` (over CPython's int-to-str limit), `int('9' * 5000)`, `math.factorial(10**7)`, `7 ** 7 ** 7 % 5`, `float(10**400)` and `int(float('inf'))`, and passes one as the token count. EXPECT: within 2 GiB and 60 s CPU, no traceback (no ValueError/OverflowError escaping); the good files' three findings (rc 1)."""
    run_bomb(
        work,
        """\
        a = 2 ** 2 ** 40
        b = 10 ** 10 ** 8
        c = pow(3, 10**9)
        d = 1 << 10**10
        e = str(2 ** 100000)
        f = int('9' * 5000)
        g = math.factorial(10**7)
        h = 7 ** 7 ** 7 % 5
        i = float(10**400)
        j = int(float('inf'))
        x = a + b + c + d + len(e) + f + g + h + int(i) + j
        """,
    )


def test_recursion_shapes(work):
    """CLASS 6: propose calls a self-recursive function, a mutually recursive pair, a recursive property, a `__getattr__` that calls itself, the Y-combinator `(lambda s: s(s))(lambda s: s(s))` and a recursive `functools.partial`. EXPECT: no RecursionError or traceback, within 60 s CPU; the good files' three findings (rc 1)."""
    run_bomb(
        work,
        """\
        a = f(0)
        b = g(1)
        c = self.loop
        d = self.anything
        e = (lambda s: s(s))(lambda s: s(s))
        p = functools.partial(f, 1)
        x = a + b + c + d + e + p()
        """,
        prelude="""\
        def f(n):
            return f(n + 1) + 1

        def g(n):
            return h(n) * 2

        def h(n):
            return g(n) + 1

        class Base(DraftModelSpeculator):
            @property
            def loop(self):
                return self.loop

            def __getattr__(self, name):
                return getattr(self, name)
        """,
        base="Base",
    )


def test_generators_and_comprehensions(work):
    """CLASS 6: propose sums a generator over `range(10**15)`, builds a 10**5 x 10**5 nested comprehension, `list(itertools.product(range(100), repeat=10))`, `sorted(range(10**12))`, `[*range(10**10)]`, `a, *b = range(10**11)`, a dict comprehension over `range(10**9)`, and loops over `itertools.count()` (an endless loop) and `while True`. EXPECT: within 2 GiB and 60 s CPU, no traceback; the good files' three findings (rc 1)."""
    run_bomb(
        work,
        """\
        a = sum(i for i in range(10**15))
        b = [[i * j for i in range(10**5)] for j in range(10**5)]
        c = list(itertools.product(range(100), repeat=10))
        d = sorted(range(10**12))
        e = [*range(10**10)]
        f0, *f = range(10**11)
        g = {i: i for i in range(10**9)}
        n = 0
        for _ in itertools.count():
            n += 1
        while True:
            n += 1
        x = a + len(b) + len(c) + len(d) + len(e) + len(f) + len(g) + n
        """,
    )


def test_builtins_that_raise(work):
    """CLASS 6: propose hits what raises inside CPython's builtins: `num_reqs // 0`, `chr(-1)`, `'abc'[10**20]`, `int('x')`, `[].pop()`, `{}['k']`, `None + 1`, `math.sqrt(-1)`, `bytes([300])`, `(300).to_bytes(1, 'little')`, `'{0}{1}'.format(1)`, `'x'.encode('no-such-codec')`, `2.0 ** 10000`. EXPECT: no traceback; the good files' three findings (rc 1)."""
    run_bomb(
        work,
        """\
        a = num_reqs // 0
        b = chr(-1)
        c = 'abc'[10**20]
        d = int('x')
        e = [].pop()
        f = {}['k']
        g = None + 1
        h = math.sqrt(-1)
        i = bytes([300])
        j = (300).to_bytes(1, 'little')
        k = '{0}{1}'.format(1)
        m = 'x'.encode('no-such-codec')
        o = 2.0 ** 10000
        x = (a, b, c, d, e, f, g, h, i, j, k, m, o)
        """,
    )


def _served_with(work, vllm_src, rel, anchor, payload):
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    path = src / rel
    text = path.read_text()
    assert text.count(anchor) == 1, f"cannot set up: anchor not unique/found in {rel}"
    path.write_text(text.replace(anchor, anchor + textwrap.indent(textwrap.dedent(payload), " " * 8)))
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    return src


def test_served_builder_with_value_bombs(work, vllm_src):
    """CLASS 6: in the served vLLM (a copy of 0.33.0), `FlashInferMLAMetadataBuilder.__init__`, which CFG102 evaluates, first doubles a dict 64 times, builds `'x' * 10**12`, `2 ** 2 ** 40`, `[[0] * 10**6] * 10**6` and `str(2 ** 100000)`. EXPECT: within 2 GiB and 60 s CPU, no traceback; CFG104 reported (rc 1) and CFG102 named (fired, or not judged as too costly): never silently clean."""
    src = _served_with(
        work,
        vllm_src,
        "v1/attention/backends/mla/flashinfer_mla.py",
        "        parallel_config = vllm_config.parallel_config\n",
        """\
        _d = {"k": 1}
        for _i in range(64):
            _d = {**_d, **{_k + "x": _v for _k, _v in _d.items()}}
        _s = "x" * 10**12
        _n = 2 ** 2 ** 40
        _l = [[0] * 10**6] * 10**6
        _r = str(2 ** 100000)
        _size = len(_d) + len(_s) + _n + len(_l) + len(_r)
        """,
    )
    res = run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work)
    assert_no_crash(res, (1,))
    codes = config_codes(res)
    assert "CFG104" in codes, res
    assert "CFG102" in codes or "CFG102" in res.stderr, f"CFG102 silently dropped: {res!r}"


def test_served_config_post_init_recursion_and_loops(work, vllm_src):
    """CLASS 6: in the served vLLM, `VllmConfig.__post_init__` starts with a self-recursive call, a Y-combinator, `sum(range(10**15))` and an endless `while True` loop. EXPECT: within 2 GiB and 60 s CPU, no traceback/RecursionError; rc 0, 1 or 3, and each hazard of the clean run (CFG102, CFG104) is still named (fired or not judged)."""
    src = copy_vllm(vllm_src, work / "src" / "vllm")
    path = src / "config" / "vllm.py"
    text = path.read_text()
    anchor = "    def __post_init__(self):\n"
    assert text.count(anchor) == 1, "cannot set up: VllmConfig.__post_init__ not found once"
    payload = textwrap.indent(
        textwrap.dedent(
            """\
            def _rec(n):
                return _rec(n + 1)
            _a = _rec(0)
            _b = (lambda s: s(s))(lambda s: s(s))
            _c = sum(range(10**15))
            _n = 0
            while True:
                _n += 1
            """
        ),
        " " * 8,
    )
    path.write_text(text.replace(anchor, anchor + payload))
    (work / "c.yaml").write_text(DSPARK_DCP_YAML)
    res = run_cli(["config", "c.yaml", "--vllm-source", str(src), "--format", "json"], work)
    assert_no_crash(res, (0, 1, 3))
    everything = res.stdout + res.stderr
    for code in ("CFG102", "CFG104"):
        assert code in everything, f"{code} silently dropped: {res!r}"


def test_merges_returning_huge_and_hostile_values(work):
    """CLASS 6: three spec merges flagged by SG201 return, for the mixed group, `any(...) * 7 ** 20000` (a 17,000-digit int, over CPython's int-to-str limit), a 30,000-character string of terminal escapes, and a list of 90,000 flags; the finding's message describes the merged value. EXPECT: no traceback, no raw ESC/BEL in the output; SG201 for each of the three merges and the good files' findings (rc 1)."""
    src = textwrap.dedent(
        """\
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class BigIntSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                big = 7 ** 20000
                return cls(non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs) * big)

        @dataclass(frozen=True)
        class EscapeSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                s = "\\x1b[2J\\x1b]0;pwned\\x07" * 3000
                return cls(non_causal_multi_token_decode=s if any(x.non_causal_multi_token_decode for x in specs) else False)

        @dataclass(frozen=True)
        class ListSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):
                return cls(non_causal_multi_token_decode=[any(x.non_causal_multi_token_decode for x in specs)] * 90000)
        """
    )
    root = make_project(work / "proj", {"pkg/values.py": src})
    res = run_cli(["check", ".", "--output-format", "json"], root)
    rows = [i for i, line in enumerate(src.splitlines(), 1) if "return cls(" in line]
    assert_good_findings(res, root, set(GOOD_FINDINGS) | {("pkg/values.py", "SG201", r) for r in rows})
    concise = run_cli(["check", ".", "-n"], root)
    assert_no_crash(concise, (1,))
    assert b"\x1b" not in concise.out + concise.err and b"\x07" not in concise.out + concise.err, concise
