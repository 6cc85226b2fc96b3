"""Decorators placed around forward calls by the fork (timing, retry and a
DP-attention switch)."""

from __future__ import annotations

import functools
import logging
import time
from typing import Callable, Dict, Tuple, Type

from sglang.srt.runtime_context import get_parallel
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)

FORWARD_TIMINGS: Dict[str, float] = {}


def timed(label: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                FORWARD_TIMINGS[label] = time.perf_counter() - t0

        return inner

    return deco


def retry(times: int = 2, on: Tuple[Type[BaseException], ...] = (RuntimeError,)):
    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            last = None
            for attempt in range(times):
                try:
                    return fn(*args, **kwargs)
                except on as exc:  # noqa: PERF203
                    last = exc
                    logger.warning("retrying %s (%d): %s", fn.__name__, attempt, exc)
            raise last

        return inner

    return deco


def single_rank_only(fallback: Callable) -> Callable:
    """Run the wrapped function only without DP attention; else ``fallback``."""

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if require_mlp_sync():
                return fallback(*args, **kwargs)
            return fn(*args, **kwargs)

        return inner

    return deco


def without_context_parallel(fallback: Callable) -> Callable:
    """Run the wrapped function only when decode context parallelism is off."""

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            if get_parallel().dcp_enabled:
                return fallback(*args, **kwargs)
            return fn(*args, **kwargs)

        return inner

    return deco


def passthrough(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        return fn(*args, **kwargs)

    return inner
