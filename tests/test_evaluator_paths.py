"""Paths through tests and handlers (issue 28's fifth session, from a review of it): what the evaluator says a
function may return includes what CPython returns (an assertion failing into a handler), an `and`/`or` test that
is a doubt costs one run of each block however long an `elif` chain of them is, and SG202's path-by-path runs
never combine two sides of one test."""

from __future__ import annotations

import ast
import contextlib
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from specguard.composition import check_source
from specguard.evaluation.choices import Path as TakenPath
from specguard.evaluation.evaluator import Evaluator
from specguard.evaluation.hooks import Hooks
from specguard.evaluation.program import Parsed, Program
from specguard.evaluation.values import Abstract, Function, Label, OneOf, Sym, known, plain
from specguard.program.modules import ModuleLocator


class _Subject(Hooks):
    subjects = frozenset({"src"})


def _returns(text: str, bindings: dict[str, Any], hooks: Hooks | None = None) -> list[Any]:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "generated.py").write_text(textwrap.dedent(text))
        locator = ModuleLocator(installed=False)
        locator.add("generated", root / "generated.py", root)
        prog = Program(locator, root, Parsed())
        module = prog.module("generated")
        assert module is not None
        flow = Evaluator(prog, hooks=hooks, budget=20_000).run(Function(module, module.functions["fn"]), bindings)
    return [value for _, value in flow.returns]


def _possible(values: list[Any]) -> set[Any] | None:
    out: set[Any] = set()
    for value in values:
        inner = plain(value)
        options = inner.options if isinstance(inner, OneOf) else (inner,)
        if not all(known(plain(x)) for x in options):
            return None
        out |= {plain(x) for x in options}
    return out


def _python(text: str, *args: Any) -> Any:
    scope: dict[str, Any] = {}
    exec(compile(textwrap.dedent(text), "generated.py", "exec"), scope)  # noqa: S102 - a program written here
    return scope["fn"](*args)


HANDLERS = {
    # an assertion narrows the path that passes it, not the one its failure takes into a handler
    "an assertion that fails into a handler": """
        def fn(n):
            x = None if n == "a" else 3
            try:
                assert x is not None
                return 1
            except AssertionError:
                return 2 if x is None else 3
    """,
    # a lookup by a key the evaluation does not know may raise what the handler catches
    "a lookup that misses into a handler": """
        def fn(n):
            cached = {"a": 1}
            try:
                found = cached[n]
            except KeyError:
                found = 5
            return found
    """,
    # ... and a lookup no handler of the `try` catches goes on up
    "a lookup whose miss no handler catches": """
        def fn(n):
            cached = {"a": 1, "7": 2}
            try:
                found = cached[n]
            except ValueError:
                found = 5
            return found
    """,
}


@pytest.mark.parametrize("text", HANDLERS.values(), ids=list(HANDLERS))
@pytest.mark.parametrize("arg", ["a", "7"])
def test_what_a_handler_returns_includes_what_python_returns(text: str, arg: str) -> None:
    possible = _possible(_returns(text, {"n": Abstract()}))
    assert possible is None or _python(text, arg) in possible, (possible, _python(text, arg))


def test_an_elif_chain_of_and_tests_on_a_subject_is_run_once_per_block() -> None:
    """Each `a and b` test that is a doubt is taken operand by operand; its blocks run once on the joined states,
    so forty of them in an `elif` chain stay well within the budget."""
    chain = "\n".join(f"    {'if' if i == 0 else 'elif'} s > {i} and a > {i}:\n        r = {i}" for i in range(40))
    text = f"def fn(s, a):\n    r = -1\n{chain}\n    return r\n"
    subject = Abstract(frozenset({Label("src", "s")}))
    returns = _returns(text, {"s": subject, "a": Abstract()}, _Subject())
    assert returns  # evaluated, not out of budget


def test_one_test_in_two_helpers_is_taken_the_same_way() -> None:
    """The rows expanded in one helper and the bound in another, each under `not causal` of the same argument:
    no path has one without the other (taking the two tests apart made such a path, a false positive)."""
    source = textwrap.dedent(
        """
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        def _rows(decode, n, causal):
            block_table, seq_lens = decode.block_table, decode.seq_lens
            if not causal:
                block_table, seq_lens = block_table.repeat_interleave(n, dim=0), seq_lens.repeat_interleave(n)
            return block_table, seq_lens

        def _bound(decode, n, causal):
            bound = decode.dcp_tot_seq_lens
            if not causal:
                bound = bound.repeat_interleave(n)
            return bound

        def forward_mqa(q, kv_cache, decode, causal, n):
            block_table, seq_lens = _rows(decode, n, causal)
            return trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens,
                causal_seqlens_kv_global=_bound(decode, n, causal),
            )
        """
    )
    assert check_source(source) == []
    assert [
        f.code
        for f in check_source(source.replace("    if not causal:\n        bound", "    if causal:\n        bound"))
    ] == ["SG202"]


def test_a_lookup_that_may_miss_into_a_handler_is_a_path_of_its_own() -> None:
    """Rows cached by an earlier call, or expanded in the handler of the lookup's miss: the path where the lookup
    raises expands the rows and not the bound (joined with the other path, the rows were only maybe expanded and
    no path was named)."""
    source = textwrap.dedent(
        """
        from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla

        def forward_mqa(q, kv_cache, decode, n, cache):
            try:
                block_table, seq_lens = cache[n]
            except KeyError:
                block_table = decode.block_table.repeat_interleave(n, dim=0)
                seq_lens = decode.seq_lens.repeat_interleave(n)
            return trtllm_batch_decode_with_kv_cache_mla(
                query=q, kv_cache=kv_cache, block_tables=block_table, seq_lens=seq_lens,
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
        """
    )
    [finding] = check_source(source)
    assert finding.code == "SG202" and "on the path where `cache[n]` (line 6) raises" in finding.message
    assert check_source(source.replace("except KeyError", "except ZeroDivisionError")) == []


def test_a_path_names_a_test_it_met_again_once() -> None:
    """A helper called once per layer meets its test once per call: the path says each test and side once."""
    test = ast.parse("if dcp and q_len > 1:\n    pass").body[0].test  # type: ignore[attr-defined]
    other = ast.parse("if bs is None:\n    pass").body[0].test  # type: ignore[attr-defined]
    path = TakenPath([(test, False), (other, True), (test, False)], None)
    assert path.describe() == "`dcp and q_len > 1` (line 1) is false and `bs is None` (line 1) is true"
    assert TakenPath([(test, False), (test, True)], None).describe().count("q_len") == 2  # two sides: both named
    elsewhere = TakenPath([(test, False), (other, True)], None, {id(test): "/src/sglang/backend.py"})
    assert elsewhere.describe("/src/fork.py") == (
        "`dcp and q_len > 1` (backend.py line 1) is false and `bs is None` (line 1) is true"
    ), "a test of another file is named with its file's name"


LOCAL_TEST = """
def fn(mode, strict):
    spec = mode.is_verify() or mode.is_extend()
    if spec and strict:
        raise ValueError("refused")
    if mode.is_verify():
        return 1
    if spec:
        return 2
    return 3
"""


@pytest.mark.parametrize(("strict", "expected"), [(True, {3}), (False, {1, 2, 3})], ids=["refused", "not refused"])
def test_a_local_found_false_holds_a_test_that_is_false(strict: bool, expected: set[int]) -> None:
    """`spec` failed the refusal's test with `strict` true: it is false on the path that goes on, and so is each part
    of the test it was bound to, asked again; CPython agrees on each mode."""
    from specguard.evaluation.values import Sym

    class Mode:
        def __init__(self, verify: bool, extend: bool) -> None:
            self.verify, self.extend = verify, extend

        def is_verify(self) -> bool:
            return self.verify

        def is_extend(self) -> bool:
            return self.extend

    python = set()
    for verify in (False, True):
        for extend in (False, True):
            with contextlib.suppress(ValueError):  # refused
                python.add(_python(LOCAL_TEST, Mode(verify, extend), strict))
    assert python == expected
    found = _possible(_returns(LOCAL_TEST, {"mode": Sym("mode"), "strict": strict}))
    assert found is None and not strict or found == expected, found


REBOUND = """
def fn(mode, other, strict):
    spec = mode.is_verify()
    mode = other
    if spec and strict:
        raise ValueError("refused")
    if mode.is_verify():
        return 1
    return 3
"""


def test_a_local_whose_test_reads_a_name_bound_again_narrows_only_itself() -> None:
    """`mode` is another object once `spec` is tested: what the refusal says of `spec` says nothing of it."""
    from specguard.evaluation.values import Sym

    found = _returns(REBOUND, {"mode": Sym("mode"), "other": Sym("other"), "strict": True})
    assert _possible(found) != {3}, found


EITHER = """
def fn(mode):
    if not (mode.is_draft_extend() or mode.is_idle()):
        raise ValueError("refused")
    if mode.is_idle():
        return 1
    if mode.is_draft_extend():
        return 2
    return 3
"""


def test_an_or_that_held_settles_its_last_open_question() -> None:
    """Past the refusal one of the two questions holds: once `is_idle()` is answered False, `is_draft_extend()` is
    True, so 3 is never returned; CPython agrees on every mode."""
    from specguard.evaluation.values import Sym

    class Mode:
        def __init__(self, extend: bool, idle: bool) -> None:
            self.extend, self.idle = extend, idle

        def is_draft_extend(self) -> bool:
            return self.extend

        def is_idle(self) -> bool:
            return self.idle

    python = set()
    for extend in (False, True):
        for idle in (False, True):
            with contextlib.suppress(ValueError):
                python.add(_python(EITHER, Mode(extend, idle)))
    assert python == {1, 2}
    assert _possible(_returns(EITHER, {"mode": Sym("mode")})) == python


ENTERED = """
class Marked:
    def __init__(self, batch):
        self.batch = batch

    def __enter__(self):
        self.batch.marked = True
        return self.batch

    def __exit__(self, kind, exc, tb):
        self.batch.left = True
        return False


class Batch:
    def __init__(self):
        self.marked = False
        self.left = False


def fn():
    batch = Batch()
    with Marked(batch) as entered:
        inside = (entered is batch, entered.marked, entered.left)
    return inside + (batch.left,)
"""


def test_a_with_over_an_object_of_the_tree_runs_its_enter_and_exit() -> None:
    """`with Marked(batch) as entered:` binds what `__enter__` returns, with its writes, and `__exit__` runs when the
    block is left: as CPython runs it."""
    python = _python(ENTERED)
    assert python == (True, True, False, True)
    (found,) = _returns(ENTERED, {})
    assert tuple(plain(x) for x in plain(found)) == python


NARROWED_MODE = """
import enum


class Mode(enum.IntEnum):
    IDLE = 1
    VERIFY = 2

    def is_idle(self):
        return self == Mode.IDLE


class Batch:
    def __init__(self, mode):
        self.mode = mode


def fn(batch):
    batch.mode = Mode.IDLE if batch.mode.is_idle() else Mode.VERIFY
    copied = Batch(batch.mode)
    if not batch.mode.is_idle():
        return copied.mode
    return None
"""


def test_a_mode_one_of_a_few_is_narrowed_wherever_it_is_held() -> None:
    """The mode set under an undecided test is one of two; past `not batch.mode.is_idle()` it is VERIFY, in the
    batch built from it too (one value, computed once): as CPython has it for each mode the batch came with."""

    class Given:
        def __init__(self, idle: bool) -> None:
            self.idle = idle

        def is_idle(self) -> bool:
            return self.idle

    class Holder:
        def __init__(self, idle: bool) -> None:
            self.mode = Given(idle)

    python = {repr(_python(NARROWED_MODE, Holder(idle))) for idle in (False, True)}
    assert python == {"None", "<Mode.VERIFY: 2>"}
    from specguard.evaluation.values import Sym

    found = {repr(plain(v)) for v in _returns(NARROWED_MODE, {"batch": Sym("batch")})}
    assert found == {"None", "Mode.VERIFY"}, found


COMPREHENDED = """
class Batch:
    def __init__(self):
        self.planned = False


def plan(batch):
    batch.planned = True
    return batch


def fn(batches):
    made = Batch()
    known = [plan(b) for b in [made]]
    unsized = [plan(b) for b in batches]
    return made.planned, [b.planned for b in known], unsized[0].planned
"""


def test_what_a_comprehension_writes_into_objects_stays_written() -> None:
    """A comprehension's loop variable is its own, but the objects its calls write to are the caller's: CPython
    sees `made.planned` set after the first one, and so must the evaluator (over a list of unknown size too)."""

    class Given:
        planned = False

    assert _python(COMPREHENDED, [Given()]) == (True, [True], True)
    from specguard.evaluation.values import Sym

    (found,) = _returns(COMPREHENDED, {"batches": Sym("batches")})
    made, known_ones, _ = plain(found)
    assert (plain(made), [plain(x) for x in plain(known_ones)]) == (True, [True]), found


UNPACKED_RECORD = """
from typing import NamedTuple


class Lens(NamedTuple):
    local: int
    global_: int


def fn(swap):
    lens = Lens(1, 2)
    first, second = lens
    return (second, first) if swap else (first, second), lens[1], [x for x in lens]
"""


@pytest.mark.parametrize("swap", [False, True])
def test_a_named_tuple_unpacks_indexes_and_iterates_as_its_fields(swap: bool) -> None:
    """A `NamedTuple` is the tuple of its fields in declared order, as CPython unpacks, indexes and iterates it."""
    (found,) = _returns(UNPACKED_RECORD, {"swap": swap})
    pair, second, items = plain(found)
    assert (tuple(plain(x) for x in plain(pair)), plain(second), [plain(x) for x in plain(items)]) == (
        _python(UNPACKED_RECORD, swap)[0],
        *_python(UNPACKED_RECORD, swap)[1:],
    )


DEFAULTED = """
from dataclasses import dataclass


@dataclass
class Meta:
    seq_lens: int


def load(source) -> Meta:
    return source.load()


def fn(source):
    meta = load(source)
    return getattr(meta, "local_seq_lens", "default"), getattr(meta, "seq_lens", "default")
"""


def test_getattr_of_a_field_no_class_of_the_lineage_has_gives_the_default() -> None:
    """An instance known only by its class (a dataclass the tree holds whole) has no `local_seq_lens`: CPython gives
    the default, and so does the evaluator; a declared field is not the default."""
    from specguard.evaluation.values import UNKNOWN

    class Given:
        seq_lens = 3

        def load(self) -> Given:
            return self

    assert _python(DEFAULTED, Given()) == ("default", 3)
    (found,) = _returns(DEFAULTED, {"source": UNKNOWN})
    missing, declared = plain(found)
    assert plain(missing) == "default" and plain(declared) != "default", found


RAISING_SIDE = """
def fn(a, flag):
    v = None if flag else a // a
    w = flag or a // a
    return v, w
"""


@pytest.mark.parametrize("flag", [True, False])
def test_a_side_of_an_undecided_choice_that_raises_is_a_raising_path(flag: bool) -> None:
    """`None if flag else a // a` with a = 0: where `flag` is false CPython raises, so the value None the evaluator
    gives holds only on the paths that go on; the raise is a path of its own (hypothesis found this one: a value
    claimed while Python raised and no raise counted). The same for an `or` past an undecided operand."""
    from specguard.evaluation.values import UNKNOWN

    with pytest.raises(ZeroDivisionError) if not flag else contextlib.nullcontext():
        _python(RAISING_SIDE, 0, flag)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "generated.py").write_text(textwrap.dedent(RAISING_SIDE))
        locator = ModuleLocator(installed=False)
        locator.add("generated", root / "generated.py", root)
        prog = Program(locator, root, Parsed())
        module = prog.module("generated")
        assert module is not None
        flow = Evaluator(prog, budget=20_000).run(Function(module, module.functions["fn"]), {"a": 0, "flag": UNKNOWN})
    assert len(flow.raises) == 2 and all(s.raised and "ZeroDivisionError" in s.raised for s in flow.raises)
    ((_, returned),) = flow.returns
    assert plain(plain(returned)[0]) is None, returned


ASSERTED_EQUAL = """
def fn(worker):
    assert worker.num_steps == 1
    ran = 0
    for i in range(worker.num_steps):
        if i == worker.num_steps - 1:
            break
        ran += 1
    return ran
"""


def test_a_name_found_equal_to_a_constant_is_that_constant() -> None:
    """`assert worker.num_steps == 1`: on the path that goes on, `range(worker.num_steps)` runs once and breaks
    before the rest of its body (an SG106 false positive of blind set 33, `TreeDraftWorker.draft_single_step`,
    whose step loop never reaches a forward)."""

    class Worker:
        num_steps = 1

    assert _python(ASSERTED_EQUAL, Worker()) == 0
    assert _possible(_returns(ASSERTED_EQUAL, {"worker": Sym("worker")})) == {0}


def test_a_slice_of_what_may_be_none_may_raise_into_a_handler() -> None:
    """An unknown no one said exists may be None, whose slice raises the `TypeError` a handler catches (set 12's
    `try: lens = metadata.seq_lens_k[:bs]` / `except TypeError:` fallback, once the read carries a label)."""
    text = """
        def fn(n):
            try:
                n[:1]
                return 1
            except TypeError:
                return 2
    """
    possible = _possible(_returns(text, {"n": Abstract(frozenset({Label("x", "n")}))}))
    assert possible is not None and _python(text, None) in possible and _python(text, "ab") in possible


def test_a_namespace_and_a_called_instance_are_objects_of_the_tree() -> None:
    """`types.SimpleNamespace(a=..., b=...)` is an object with those fields, and an instance called runs its
    class's `__call__` (set 41's action tables, set 42's callable planner)."""
    text = """
        from types import SimpleNamespace

        class Scale:
            def __init__(self, k):
                self.k = k

            def __call__(self, v):
                return v * self.k

        def fn(n):
            ns = SimpleNamespace(a=2, b=n)
            ns.c = 3
            return Scale(ns.a)(ns.c) + ns.a
    """
    assert _possible(_returns(text, {"n": Abstract()})) == {_python(text, 0)}


def test_a_division_by_one_of_a_few_divisors_one_of_them_zero_may_raise_and_may_return() -> None:
    """`a // d` where `d` is 0 on one path and 3 on another: the first path raises, the other returns (hypothesis
    found the evaluator saying the function always raises)."""
    text = """
        def fn(a, n):
            d = 0 if n == "a" else 3
            return a // d
    """
    assert _possible(_returns(text, {"a": 6, "n": Abstract()})) == {_python(text, 6, "7")}
