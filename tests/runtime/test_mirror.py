"""The signature-mirroring wrapper the G2 guard puts on FlashInfer's MLA decode entry."""

from __future__ import annotations

import functools
import inspect

from specguard.runtime.mirror import mirror

WATCHED = {"query": None, "block_tables": None, "enable_dcp": False}


def _recorder() -> tuple[list[tuple], object]:
    seen: list[tuple] = []
    return seen, lambda *values: seen.append(values)


def test_keyword_call_reaches_before_and_original_unchanged() -> None:
    sentinel = object()

    def entry(query, kv_cache, block_tables, out=None, backend="auto", marker=sentinel, enable_dcp=False):
        return (query, kv_cache, block_tables, out, backend, marker, enable_dcp)

    seen, before = _recorder()
    wrapped = mirror(entry, before, WATCHED, required=("query", "block_tables"))
    assert wrapped is not None
    assert wrapped(query="q", kv_cache="kv", block_tables="bt", enable_dcp=True) == (
        "q",
        "kv",
        "bt",
        None,
        "auto",
        sentinel,  # the original's own default object, not a copy or a repr
        True,
    )
    assert seen == [("q", "bt", True)]
    assert wrapped("q", "kv", "bt") == entry("q", "kv", "bt")  # positional calls bind the same way


def test_a_parameter_the_signature_lacks_gets_its_absent_value() -> None:
    def old_entry(query, block_tables):  # an older FlashInfer: no DCP parameters
        return "launched"

    seen, before = _recorder()
    wrapped = mirror(old_entry, before, WATCHED)
    assert wrapped(query="q", block_tables="bt") == "launched"
    assert seen == [("q", "bt", False)]


def test_every_parameter_kind_is_forwarded() -> None:
    def entry(a, /, b, *rest, query, block_tables=None, **extra):
        return a, b, rest, query, block_tables, extra

    seen, before = _recorder()
    wrapped = mirror(entry, before, WATCHED)
    assert wrapped(1, 2, 3, 4, query="q", other=5) == (1, 2, (3, 4), "q", None, {"other": 5})
    assert seen == [("q", None, False)]
    assert str(inspect.signature(wrapped)) == "(a, /, b, *rest, query, block_tables=None, **extra)"


def test_keyword_only_parameters_without_star_args() -> None:
    def entry(query, *, block_tables, enable_dcp=False):
        return query, block_tables, enable_dcp

    seen, before = _recorder()
    wrapped = mirror(entry, before, WATCHED)
    assert wrapped("q", block_tables="bt") == ("q", "bt", False)
    assert seen == [("q", "bt", False)]


def test_follows_a_decorator_to_the_real_signature() -> None:
    """FlashInfer's entry is an API-logging `(*args, **kwargs)` decorator around the real function."""

    def real(query, block_tables, enable_dcp=False):
        return query, block_tables, enable_dcp

    @functools.wraps(real)
    def decorated(*args, **kwargs):
        return real(*args, **kwargs)

    seen, before = _recorder()
    wrapped = mirror(decorated, before, WATCHED, required=("query", "block_tables"))
    assert wrapped(block_tables="bt", query="q") == ("q", "bt", False)
    assert seen == [("q", "bt", False)]


def test_cannot_mirror_returns_none() -> None:
    def stand_in(**kwargs):
        return kwargs

    def clashing(query, __sg_before):
        return query

    assert mirror(stand_in, print, WATCHED, required=("query", "block_tables")) is None
    assert mirror(clashing, print, WATCHED) is None
    assert mirror(len, print, WATCHED, required=("query",)) is None  # a builtin: no named parameters
