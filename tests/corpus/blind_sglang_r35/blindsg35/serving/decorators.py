"""Decorators that wrap draft forwards (timing, retries, pre-planning)."""

from __future__ import annotations

import functools
import logging
import operator
import time
from typing import Any, Callable, Tuple, Type

from sglang.srt.model_executor.forward_batch_info import ForwardBatch

from blindsg35.serving._plan import is_dp_padded

logger = logging.getLogger(__name__)


def timed_forward(stage: str) -> Callable:
    def _decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def _wrapper(self, *args, **kwargs):
            tic = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                elapsed_ms = (time.perf_counter() - tic) * 1e3
                logger.debug("%s took %.3f ms", stage, elapsed_ms)

        return _wrapper

    return _decorate


def retry_forward(
    retries: int = 1, exceptions: Tuple[Type[BaseException], ...] = (RuntimeError,)
) -> Callable:
    def _decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def _wrapper(*args, **kwargs):
            attempt = 0
            while True:
                try:
                    return fn(*args, **kwargs)
                except exceptions:
                    attempt += 1
                    if attempt > retries:
                        raise
                    logger.warning("retrying %s (attempt %d)", fn.__name__, attempt)

        return _wrapper

    return _decorate


def preplanned(backend_path: str, *, replan_equivalent: bool = False) -> Callable:
    """Plan ``forward_batch`` on ``self.<backend_path>`` and mark it ready
    before the wrapped method runs.  ``backend_path`` is a dotted attribute
    path resolved on ``self`` (e.g. ``"draft_runner.attn_backend"``)."""

    get_backend = operator.attrgetter(backend_path)

    def _decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def _wrapper(self, forward_batch: ForwardBatch, *args, **kwargs) -> Any:
            if not forward_batch.forward_mode.is_idle():
                get_backend(self).init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(
                    replan_equivalent=replan_equivalent
                )
            return fn(self, forward_batch, *args, **kwargs)

        return _wrapper

    return _decorate


def preplan_unless_padded(backend_path: str) -> Callable:
    """Pre-plan only batches the forward will not pad; padded batches are
    left unmarked so the forward plans them after prepare_mlp_sync_batch."""

    get_backend = operator.attrgetter(backend_path)

    def _decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def _wrapper(self, forward_batch: ForwardBatch, *args, **kwargs) -> Any:
            if not forward_batch.forward_mode.is_idle() and not is_dp_padded(
                forward_batch
            ):
                get_backend(self).init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
            return fn(self, forward_batch, *args, **kwargs)

        return _wrapper

    return _decorate
