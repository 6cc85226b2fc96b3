"""Context managers wrapped around draft forwards."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Optional

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context


@contextlib.contextmanager
def draft_backend_scope(backend: Any, forward_batch: ForwardBatch) -> Iterator[None]:
    """Publish ``backend`` as the active attention backend for the forward."""
    with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
        yield


@contextlib.contextmanager
def planned_forward_scope(
    backend: Any,
    forward_batch: ForwardBatch,
    *,
    replan_equivalent: bool = False,
) -> Iterator[ForwardBatch]:
    """Plan ``forward_batch`` on ``backend``, mark it planned, and publish the
    backend for the forwards run inside the block."""
    backend.init_forward_metadata(forward_batch)
    forward_batch.mark_forward_metadata_ready(replan_equivalent=replan_equivalent)
    with forward_context(ForwardContext(attn_backend=backend), forward_batch=forward_batch):
        yield forward_batch


@contextlib.contextmanager
def plan_stream_scope(stream: Optional[Any], device: str = "cuda") -> Iterator[None]:
    """Run the block on ``stream`` (if any) and join it back afterwards."""
    if stream is None:
        yield
        return
    dev = torch.get_device_module(device)
    stream.wait_stream(dev.current_stream())
    with dev.stream(stream):
        yield
    dev.current_stream().wait_stream(stream)


@contextlib.contextmanager
def step_timer(stats: dict, key: str) -> Iterator[None]:
    tic = time.perf_counter()
    try:
        yield
    finally:
        stats[key] = stats.get(key, 0.0) + time.perf_counter() - tic
