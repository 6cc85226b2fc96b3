"""Decorators the lab puts on worker steps."""

from __future__ import annotations

import functools
import logging
import time

logger = logging.getLogger(__name__)

STEP_TIMES: dict = {}


def timed_step(name: str):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            tic = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                STEP_TIMES.setdefault(name, []).append(time.perf_counter() - tic)

        return wrapper

    return deco


def log_step(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        logger.info("enter %s.%s", type(self).__name__, fn.__name__)
        out = fn(self, *args, **kwargs)
        logger.info("leave %s.%s", type(self).__name__, fn.__name__)
        return out

    return wrapper
