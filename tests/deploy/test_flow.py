"""The static evaluator on small synthetic sources: three-valued tests, paths, inlining, and nothing executed."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from specguard.deploy.evaluator import config_evaluator
from specguard.evaluation.budget import OutOfBudget
from specguard.evaluation.evaluator import Evaluator
from specguard.evaluation.paths import verdict
from specguard.evaluation.values import UNKNOWN, ClassRef, EnumMember, Function, Obj
from specguard.program.tree import SourceTree

CODE = """
import enum
import os
from typing import Literal, get_args

Role = Literal["producer", "consumer"]
Both = Literal[Role, "both"]


class Mode(enum.Enum):
    NONE = 0
    FULL = 2
    MIXED = (FULL, NONE)

    def __bool__(self):
        return self != Mode.NONE


class Parallel:
    size: int = 1
    interleave: int = 1

    @property
    def big(self):
        return self.size > 4


class Base:
    flag = False

    def __init__(self, cfg, varlen=False):
        self.cfg = cfg
        self._check(varlen)

    def _check(self, varlen):
        supported = self.flag if self.cfg.size > 1 else varlen
        if not supported:
            raise ValueError(f"refused for size {self.cfg.size}")


class Child(Base):
    flag = True

    def __init__(self, cfg):
        super().__init__(cfg, varlen=cfg.interleave == 1)


def size_check(p):
    if p.size > 2:
        raise ValueError("too big")


def early_return(p, gpu):
    if gpu.is_old():
        return
    if p.size > 2:
        raise ValueError("too big after return")


def raise_under_unknown(p, gpu):
    if gpu.is_old():
        raise ValueError("old gpu")
    if p.size > 2:
        raise ValueError("too big after raise")


def both_branches(p, gpu):
    if gpu.fault_tolerant:
        logger.warning("eager everywhere (ft)")
    else:
        logger.warning("eager everywhere")


def roles(role):
    if role not in get_args(Both):
        raise ValueError("bad role")


def modes(value):
    if Mode[value.upper()]:
        raise ValueError("a graph mode")


def by_value(value):
    if Mode(value) == Mode.FULL:
        raise ValueError("full by value")


def hostile(p):
    os.system("touch {marker}")
    open("{marker}", "w").write("x")
    __import__("os").system("touch {marker}")
    if p.size > 2:
        raise ValueError("after hostile calls")


def costly(p):
    big = "x" * (10 ** 12)
    wide = "{:>1000000000}".format(1)
    huge = 10 ** 10 ** 10
    padded = "%*d" % (10 ** 9, 1)
    if p.size > 2:
        raise ValueError(f"after costly values {big} {wide} {huge} {padded}")


def forever(p):
    return forever(p)


class MyError(ValueError):
    pass


def caught(p):
    try:
        if p.size > 2:
            raise ValueError("caught")
    except ValueError:
        logger.warning("recovered")


def wrong_handler(p):
    try:
        if p.size > 2:
            raise ValueError("wrong handler")
    except KeyError:
        logger.warning("never")


def caught_from_callee(p):
    try:
        size_check(p)
    except (TypeError, ValueError) as exc:
        logger.warning("fell back")


def reraised(p):
    try:
        size_check(p)
    except Exception:
        logger.warning("logged, then")
        raise


def own_exception(p):
    try:
        if p.size > 2:
            raise MyError("a subclass")
    except ValueError:
        pass


def undecided_handler(p):
    try:
        if p.size > 2:
            raise ValueError("maybe caught")
    except errors_of(p):
        pass


def reraised_as_another(p):
    try:
        size_check(p)
    except ValueError as exc:
        raise RuntimeError("wrapped") from exc


def label_of(p):
    return "plain"


class Holder:
    def __init__(self, p):
        self.size = p.size
        self.label = label_of(p)
        if self.size > 2:
            raise ValueError("kept after a call")


def appended_on_one_path(p, gpu):
    found = []
    if gpu.is_old():
        found.append("old")
    if found:
        raise ValueError("found something")


def appended_on_a_decided_path(p):
    found = []
    if p.size > 2:
        found.append("big")
    if found:
        raise ValueError("found big")


def nested_on_one_path(p, gpu):
    options = {"size": {"nargs": "+"}, "mode": {}}
    if gpu.is_old():
        options["mode"]["nargs"] = "?"
    if options["size"]["nargs"] == "+":
        raise ValueError("agreed part kept")


HAS_FAST = True
try:
    import fastlib
except ImportError:
    HAS_FAST = False


def fast_path(p):
    if HAS_FAST:
        raise ValueError("fast")


def environment_tests(p):
    label = os.environ.get("SG_LABEL")
    strict = os.environ.get("SG_STRICT")
    if strict:
        raise ValueError("strict")
    if os.getenv("SG_DIRECT", "1") == "1":
        pass


open("{marker}", "w").write("module level")
"""


@pytest.fixture
def tree(tmp_path: Path) -> tuple[SourceTree, Path]:
    pkg = tmp_path / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    marker = tmp_path / "executed"
    (pkg / "m.py").write_text(textwrap.dedent(CODE).replace("{marker}", str(marker)))
    return SourceTree.open(pkg), marker


def _run(tree: SourceTree, name: str, *args: Any, self_value: Any = None) -> Evaluator:
    module = tree.module("vllm.m")
    assert module is not None
    ev = config_evaluator(tree)
    if "." in name:
        cls, _, meth = name.partition(".")
        info = module.classes[cls]
        func = Function(module, tree.method(info, meth)[0], tree.method(info, meth)[1])  # type: ignore[index]
    else:
        func = Function(module, module.functions[name])
    ev.call_function(func, list(args), {}, self_value=self_value)
    return ev


def _parallel(tree: SourceTree, **fields: Any) -> Obj:
    return Obj(tree.module("vllm.m").classes["Parallel"], fields, defaults=True)  # type: ignore[union-attr]


def _messages(ev: Evaluator) -> list[str]:
    return [o.site.message for o in ev.outcomes]


def test_a_decided_test_picks_its_branch(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    assert verdict(_run(t, "size_check", _parallel(t, size=4)).outcomes).value is True
    assert verdict(_run(t, "size_check", _parallel(t, size=2)).outcomes).value is False
    # A field not given takes the class default.
    assert verdict(_run(t, "size_check", _parallel(t)).outcomes).value is False


def test_an_undecided_test_names_itself(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    v = verdict(_run(t, "size_check", _parallel(t, size=UNKNOWN)).outcomes)
    assert v.value is UNKNOWN
    assert "`p.size > 2` (m.py:" in v.reasons()


def test_an_undecided_return_makes_the_rest_conditional_a_raise_does_not(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    gpu = Obj(None, {})
    after_return = [o for o in _run(t, "early_return", _parallel(t, size=4), gpu).outcomes]
    assert verdict(after_return).value is UNKNOWN and "gpu.is_old()" in verdict(after_return).reasons()
    after_raise = [
        o
        for o in _run(t, "raise_under_unknown", _parallel(t, size=4), gpu).outcomes
        if o.site.message == "too big after raise"
    ]
    assert verdict(after_raise).value is True


def test_outcomes_on_every_branch_of_an_undecided_test_are_certain(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    ev = _run(t, "both_branches", _parallel(t), Obj(None, {}))
    assert sorted(_messages(ev)) == ["eager everywhere", "eager everywhere (ft)"]
    assert verdict(ev.outcomes).value is True  # together they cover every case
    assert verdict(ev.outcomes[:1]).value is UNKNOWN


def test_literal_aliases_and_enums(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    assert _messages(_run(t, "roles", "both")) == []
    assert _messages(_run(t, "roles", "neither")) == ["bad role"]
    assert _messages(_run(t, "modes", "full")) == ["a graph mode"]  # Mode.FULL is truthy by its __bool__
    assert _messages(_run(t, "modes", "none")) == []
    # An unknown name raises KeyError, as `Mode[...]` does; what follows reads an unknown value.
    certain = [o.site.message for o in _run(t, "modes", "auto").outcomes if not o.path]
    assert certain == ["KeyError: 'AUTO' is not a member of Mode"]
    assert _messages(_run(t, "by_value", 2)) == ["full by value"]
    assert _messages(_run(t, "by_value", 0)) == []


def test_methods_properties_and_super_are_inlined(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    module = t.module("vllm.m")
    assert module is not None
    child = module.classes["Child"]
    for cfg, refused in ((dict(size=2, interleave=1), False), (dict(size=1, interleave=2), True)):
        ev = _run(t, "Child.__init__", _parallel(t, **cfg), self_value=Obj(child, {}, defaults=True))
        assert (verdict(ev.outcomes).value is True) == refused, cfg
    [outcome] = _run(
        t, "Child.__init__", _parallel(t, size=1, interleave=2), self_value=Obj(child, {}, defaults=True)
    ).outcomes
    assert outcome.site.message == "refused for size {self.cfg.size}"
    ev = config_evaluator(t)
    assert ev.getattr(_parallel(t, size=8), "big", _state(), 0) is True
    assert ev.getattr(ClassRef(module.classes["Mode"]), "FULL", _state(), 0) == EnumMember(
        module.classes["Mode"], "FULL"
    )
    assert ev.enum_value(EnumMember(module.classes["Mode"], "MIXED")) == (2, 0)


def test_nothing_of_the_evaluated_source_runs(tree: tuple[SourceTree, Path]) -> None:
    t, marker = tree
    ev = _run(t, "hostile", _parallel(t, size=4))
    assert _messages(ev) == ["after hostile calls"]
    assert not marker.exists()


def test_values_too_costly_to_compute_are_unknown(tree: tuple[SourceTree, Path]) -> None:
    """A served tree is data: arithmetic or formatting that would take gigabytes or minutes is not computed."""
    t, _ = tree
    ev = _run(t, "costly", _parallel(t, size=4))
    assert [m.startswith("after costly values") for m in _messages(ev)] == [True]


def test_recursion_is_bounded(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    ev = _run(t, "forever", _parallel(t))
    assert ev.outcomes == []
    ev = config_evaluator(t, max_steps=2)
    module = t.module("vllm.m")
    assert module is not None
    with pytest.raises(OutOfBudget):
        ev.call_function(Function(module, module.functions["both_branches"]), [_parallel(t), Obj(None, {})], {})


def _failures(ev: Evaluator) -> Any:
    return verdict([o for o in ev.outcomes if o.site.kind == "raise"])


def test_a_raise_an_enclosing_except_catches_is_no_failure(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    big = _parallel(t, size=4)
    ev = _run(t, "caught", big)
    assert _failures(ev).value is False
    assert verdict([o for o in ev.outcomes if o.site.message == "recovered"]).value is True  # the handler ran
    assert _failures(_run(t, "wrong_handler", big)).value is True
    assert _messages(_run(t, "wrong_handler", big)) == ["wrong handler"]
    assert _failures(_run(t, "caught_from_callee", big)).value is False  # raised in the callee, caught here
    assert _failures(_run(t, "own_exception", big)).value is False  # the source's own subclass of ValueError
    assert _messages(_run(t, "caught", _parallel(t, size=1))) == []  # nothing raised: the handler never runs


def test_a_bare_raise_in_a_handler_fails_again(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    ev = _run(t, "reraised", _parallel(t, size=4))
    assert _failures(ev).value is True
    assert "too big" in [o.site.message for o in ev.outcomes if o.site.kind == "raise" and not o.caught]


def test_a_handler_the_evaluator_cannot_read_leaves_the_failure_undecided(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    v = _failures(_run(t, "undecided_handler", _parallel(t, size=4)))
    assert v.value is UNKNOWN and "errors_of(p)" in v.reasons()


def _state() -> Any:
    from specguard.evaluation.paths import State

    return State({}, {}, frozenset())


def test_a_handler_that_raises_another_exception_fails_again(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    ev = _run(t, "reraised_as_another", _parallel(t, size=4))
    assert "too big" in [o.site.message for o in ev.outcomes if o.site.kind == "raise" and not o.caught]
    assert _failures(_run(t, "reraised_as_another", _parallel(t, size=1))).value is False


def test_what_a_method_stored_survives_the_calls_after_it(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    holder = Obj(t.module("vllm.m").classes["Holder"], {}, defaults=True)  # type: ignore[union-attr]
    assert _failures(_run(t, "Holder.__init__", _parallel(t, size=4), self_value=holder)).value is True


def test_what_one_path_appends_the_other_does_not_see(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    v = _failures(_run(t, "appended_on_one_path", _parallel(t), Obj(None, {})))
    assert v.value is UNKNOWN and "`found`" in v.reasons()  # what the paths joined disagree on
    assert _failures(_run(t, "appended_on_a_decided_path", _parallel(t, size=4))).value is True
    assert _failures(_run(t, "appended_on_a_decided_path", _parallel(t, size=1))).value is False
    # Where the paths join, what they agree on is kept.
    assert _failures(_run(t, "nested_on_one_path", _parallel(t), Obj(None, {}))).value is True


def test_a_module_name_a_failed_import_check_reassigns_is_unknown(tree: tuple[SourceTree, Path]) -> None:
    t, _ = tree
    v = _failures(_run(t, "fast_path", _parallel(t)))
    assert v.value is UNKNOWN and "HAS_FAST" in v.reasons()


def test_the_environment_remembers_what_decided_a_branch(tree: tuple[SourceTree, Path]) -> None:
    from specguard.evaluation.environment import served_environment

    t, _ = tree
    with served_environment({}) as env:
        assert _failures(_run(t, "environment_tests", _parallel(t))).value is False
    assert {"SG_LABEL", "SG_STRICT", "SG_DIRECT"} <= set(env.log)
    assert env.decided_unset() == ["SG_STRICT", "SG_DIRECT"]  # SG_LABEL is read, never tested
    with served_environment({"SG_STRICT": "1"}) as env:
        assert _failures(_run(t, "environment_tests", _parallel(t))).value is True
    assert env.decided_unset() == ["SG_DIRECT"]
