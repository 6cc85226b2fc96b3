"""Paths and subprocess helpers the runtime-guard tests share (a module, not conftest, so its name cannot clash)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def venv_python() -> str:
    return sys.executable


def run_in_venv(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """A script under the test venv's python in a process of its own; a failure fails the test with its stderr."""
    proc = subprocess.run(
        [venv_python(), "-W", "ignore", *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def old_vllm_path() -> str:
    """Where .ci/runtime-env.sh put vLLM 0.28.0's code (override with SPECGUARD_VLLM_OLD_PATH)."""
    default = Path(os.environ.get("SPECGUARD_CACHE", Path.home() / ".cache" / "specguard")) / "vllm-0.28.0"
    path = Path(os.environ.get("SPECGUARD_VLLM_OLD_PATH", default))
    assert (path / "vllm" / "__init__.py").is_file(), (
        f"vLLM 0.28.0 code not found at {path}; run .ci/runtime-env.sh first"
    )
    return str(path)


def paged_wrapper(cls: type, backend: str = "fa2") -> object:
    """A FlashInfer paged wrapper without its __init__, which needs CUDA pinned memory."""
    w = object.__new__(cls)
    w._backend = backend
    return w


def common_metadata(q_lens: list[int], *, num_actual_tokens: int | None = None, **over: object) -> object:
    """vLLM's CommonAttentionMetadata for a batch of these query lengths, CPU tensors, every field
    consistent unless overridden."""
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata

    n = len(q_lens)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    tokens = sum(q_lens) if num_actual_tokens is None else num_actual_tokens
    # every request 64 tokens long, its query the last ones, written at the slots of their positions in its own
    # blocks (16 tokens each, the cpu_builder's); padding tokens at the padding slot, -1
    table = torch.arange(n * 8, dtype=torch.int32).view(n, 8)
    slots = [int(table[i, p // 16]) * 16 + p % 16 for i, q in enumerate(q_lens) for p in range(64 - q, 64)]
    slots += [-1] * (max(tokens, sum(q_lens)) - len(slots))
    fields: dict[str, object] = dict(
        query_start_loc=qsl.clone(),
        query_start_loc_cpu=qsl,
        seq_lens=torch.full((n,), 64, dtype=torch.int32),
        num_reqs=n,
        num_actual_tokens=tokens,
        max_query_len=max(q_lens),
        max_seq_len=64,
        block_table_tensor=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
    )
    fields.update(over)
    return CommonAttentionMetadata(**fields)


CPU_LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]


def cpu_config(mode: str = "FULL_AND_PIECEWISE", sizes: list[int] | None = None) -> object:
    """The parts of a VllmConfig G0 reads. vLLM's CPU platform empties cudagraph_capture_sizes (its mode
    may still name FULL graphs; none is ever captured), so that is the default."""
    import types

    from vllm.config.compilation import CUDAGraphMode

    compilation = types.SimpleNamespace(cudagraph_mode=CUDAGraphMode[mode], cudagraph_capture_sizes=sizes or [])
    return types.SimpleNamespace(compilation_config=compilation)


# FlashInfer's public MLA decode entry, which vLLM's FlashInfer MLA backend binds by this name.
MLA_ENTRY_MODULE, MLA_ENTRY = "flashinfer.mla._core", "trtllm_batch_decode_with_kv_cache_mla"


def flashinfer_mla_impl() -> tuple[object, str]:
    """(the module, the name) of the private function FlashInfer's public MLA decode entry forwards to, found
    by inspection, never by its name: the one function the entry's own code calls that takes every parameter
    of the entry (flashinfer-python 0.7.2.post1: `_trtllm_batch_decode_with_kv_cache_mla_impl`; 0.7.4 renamed
    it `_mla_with_kv_cache_impl`). Raises LookupError naming what it could not find."""
    import importlib
    import inspect

    module = importlib.import_module(MLA_ENTRY_MODULE)
    body = inspect.unwrap(getattr(module, MLA_ENTRY))  # under FlashInfer's API-logging decorator
    wanted = set(inspect.signature(body).parameters)
    called, found = [], []
    for name in body.__code__.co_names:
        target = body.__globals__.get(name)
        if not inspect.isfunction(target) or name == MLA_ENTRY:
            continue
        called.append(name)
        try:
            takes = set(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            continue
        if wanted <= takes:
            found.append(name)
    if len(found) != 1:
        raise LookupError(
            f"flashinfer-python {_flashinfer_version()}: found no private implementation function behind "
            f"{MLA_ENTRY_MODULE}.{MLA_ENTRY} (the one function its body calls that takes all of its "
            f"{len(wanted)} parameters, which 0.7.2.post1 names _trtllm_batch_decode_with_kv_cache_mla_impl and "
            f"0.7.4 _mla_with_kv_cache_impl); it calls {called or 'no function'}, and takes them: {found or 'none'}"
        )
    return sys.modules[body.__module__], found[0]


def _flashinfer_version() -> str:
    import flashinfer

    return str(getattr(flashinfer, "__version__", "?"))


def place_mla_stand_in(stand_in: object, setattr_: object = setattr) -> str | None:
    """Put `stand_in` (called with keywords only) behind FlashInfer's real public MLA decode entry, in place
    of the private function it forwards to (`flashinfer_mla_impl`), so vLLM calls the real entry as in serving
    and the guard wraps FlashInfer's own function; returns that function's name. Where no such function is
    found (a FlashInfer that no longer forwards to one), `stand_in` goes at the name vLLM's backend module
    calls instead, behind a function with the entry's own signature (the guard still wraps a function with
    FlashInfer's parameters), and None is returned: tests/runtime/test_flashinfer_surface.py is the one test
    that fails then, naming what it could not find. `setattr_` is `monkeypatch.setattr` in a test."""
    import functools
    import importlib
    import inspect

    try:
        module, name = flashinfer_mla_impl()
    except LookupError:
        entry = getattr(importlib.import_module(MLA_ENTRY_MODULE), MLA_ENTRY)
        signature = inspect.signature(entry)

        @functools.wraps(entry)
        def with_entry_signature(*args: object, **kwargs: object) -> object:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return stand_in(**bound.arguments)  # type: ignore[operator]

        backend = importlib.import_module("vllm.v1.attention.backends.mla.flashinfer_mla")
        setattr_(backend, MLA_ENTRY, with_entry_signature)  # type: ignore[operator]
        return None
    setattr_(module, name, stand_in)  # type: ignore[operator]
    return name
