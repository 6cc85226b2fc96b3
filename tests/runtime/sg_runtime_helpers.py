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
    fields: dict[str, object] = dict(
        query_start_loc=qsl.clone(),
        query_start_loc_cpu=qsl,
        seq_lens=torch.full((n,), 64, dtype=torch.int32),
        num_reqs=n,
        num_actual_tokens=tokens,
        max_query_len=max(q_lens),
        max_seq_len=64,
        block_table_tensor=torch.zeros(n, 8, dtype=torch.int32),
        slot_mapping=torch.zeros(max(tokens, sum(q_lens)), dtype=torch.int64),
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
