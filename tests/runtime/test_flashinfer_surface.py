"""What the guard and its tests rely on in FlashInfer, one named test each, on whichever flashinfer-python this run
imports (0.7.2.post1 in the venv; 0.7.4 under test_flashinfer_next.py). A FlashInfer release that renames or
reshapes one of them fails the test that names it, not every test that drives the MLA path.

The private function behind the MLA decode entry (where the tests and benchmarks/guard_overhead.py put their
stand-in kernel) is found by inspection, never by its name: 0.7.4 renamed 0.7.2.post1's
`_trtllm_batch_decode_with_kv_cache_mla_impl` to `_mla_with_kv_cache_impl`. Should no such function be found, the
MLA tests still run, their stand-in at the entry with the entry's signature, and only the first test here fails."""

from __future__ import annotations

import functools
import importlib
import inspect

import flashinfer
from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper as Decode
from flashinfer.prefill import BatchPrefillWithPagedKVCacheWrapper as Prefill
from sg_runtime_helpers import MLA_ENTRY, MLA_ENTRY_MODULE, flashinfer_mla_impl

from specguard.runtime import adapt_flashinfer, adapt_mla, coverage
from specguard.runtime.mirror import mirror


def test_the_private_mla_implementation_is_found_by_inspection() -> None:
    module, name = flashinfer_mla_impl()  # its LookupError names what it looked for
    entry = getattr(importlib.import_module(MLA_ENTRY_MODULE), MLA_ENTRY)
    assert name.startswith("_") and name in inspect.unwrap(entry).__code__.co_names
    assert inspect.isfunction(getattr(module, name))


def test_vllm_calls_the_public_mla_entry() -> None:
    from vllm.v1.attention.backends.mla import flashinfer_mla as fm

    entry = getattr(importlib.import_module(MLA_ENTRY_MODULE), MLA_ENTRY)
    assert getattr(fm, adapt_mla.KERNEL_NAME) is entry


def test_the_mla_entry_takes_every_operand_g2_reads() -> None:
    """G2 reads these by name; its fast wrapper mirrors the entry's own parameter list."""
    entry = getattr(importlib.import_module(MLA_ENTRY_MODULE), MLA_ENTRY)
    params = inspect.signature(entry).parameters
    assert set(adapt_mla._WATCHED) <= set(params), sorted(set(adapt_mla._WATCHED) - set(params))
    assert mirror(entry, lambda *a: None, adapt_mla._WATCHED, required=("query", "block_tables")) is not None


def test_the_paged_wrappers_bind_what_g1_reads() -> None:
    """plan() takes qo_indptr (prefill) and indptr and q_len_per_req (decode: a parameter, or a name of its
    deprecated positional arguments), run() takes q, and the aliases FlashInfer binds at class creation are
    the ones G1 replaces with the wrapped plan/run."""
    prefill_plan = inspect.signature(Prefill.__dict__["plan"]).parameters
    decode_plan = inspect.signature(Decode.__dict__["plan"]).parameters
    assert list(prefill_plan)[:2] == ["self", "qo_indptr"]
    assert list(decode_plan)[:2] == ["self", "indptr"]
    legacy = getattr(importlib.import_module("flashinfer.decode"), adapt_flashinfer.LEGACY_DECODE_ARGS, ())
    assert "q_len_per_req" in decode_plan or "q_len_per_req" in legacy
    for cls in (Prefill, Decode):
        assert list(inspect.signature(cls.__dict__["run"]).parameters)[:2] == ["self", "q"]
        assert cls.__dict__["begin_forward"] is cls.__dict__["plan"]
        rrl = cls.__dict__["run_return_lse"]
        assert isinstance(rrl, functools.partialmethod) and rrl.func is cls.__dict__["run"]


def test_this_flashinfer_is_one_the_guard_was_assessed_on() -> None:
    """coverage.ASSESSED lists it, so the guard keeps raise mode on it; a run on another FlashInfer fails here
    until its code has been read and the table says so."""
    assert coverage.flashinfer_assessed(flashinfer.__version__), (flashinfer.__version__, coverage.ASSESSED)
