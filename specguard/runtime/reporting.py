"""The guard's own lines in each process's log: the startup line, a counter line every
VLLM_SPECGUARD_STATS_INTERVAL seconds (DEFAULT_INTERVAL_S unless set; 0 or off turns it off), and a final
counter line at clean shutdown. The same daemon thread writes the counters for `/metrics` (metrics.py).

vLLM loads general plugins before it configures logging in some processes (the API server parses its
arguments, and loads plugins while adding them, before `configure_logging_from_args`; vLLM 0.31.0+ no
longer configures logging at import). A line logged then would reach no handler and be lost below WARNING.
So each line goes through vLLM's logger when that logger (or an ancestor) has a handler, and otherwise
through a stderr handler of the guard's own with vLLM's layout; either way it appears in that process's log.

The interval thread is a daemon that only waits, logs and writes the metrics file: it never keeps a process
alive, and a failure in it is counted as a guard error, never raised. Forked children (vLLM's engine core and
workers under the `fork` start method) inherit the patches but neither the thread nor the exit hook: the
guard's fork hook (install.py) arms their own."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import sys
import threading
from typing import Any

from specguard.runtime import metrics
from specguard.runtime.policy import POLICY, SpecGuardConfigError

STATS_ENV = "VLLM_SPECGUARD_STATS_INTERVAL"
DEFAULT_INTERVAL_S = 60.0
MIN_INTERVAL_S = 1.0  # below it the lines would flood the log (one line per process per interval)
_FORMAT = "%(levelname)s %(asctime)s [specguard] %(message)s"


def parse_interval(value: str | None, env_var: str = STATS_ENV) -> float | None:
    """Seconds between counter lines: DEFAULT_INTERVAL_S when unset or empty, None (no periodic line) for 0
    or off; a number of seconds from MIN_INTERVAL_S on; anything else is a startup error."""
    if value is None or not value.strip():
        return DEFAULT_INTERVAL_S
    if value.strip().lower() in ("0", "off"):
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not MIN_INTERVAL_S <= seconds < float("inf"):
        raise SpecGuardConfigError(
            f"{env_var}={value!r} is not a valid value; use a number of seconds from {MIN_INTERVAL_S:g} on "
            f"(unset: every {DEFAULT_INTERVAL_S:g}s), or 0/off for no periodic counter line"
        )
    return seconds


_fallback: logging.Handler | None = None


def _fallback_handler() -> logging.Handler:
    global _fallback
    if _fallback is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%m-%d %H:%M:%S"))
        _fallback = handler
    return _fallback


def emit(level: int, msg: str, *args: Any) -> None:
    """Log one guard line so that it appears whether or not logging is configured yet."""
    logger = POLICY._log()
    if logger.hasHandlers():
        logger.log(level, msg, *args)
        return
    threshold = logging.getLevelName(os.environ.get("VLLM_LOGGING_LEVEL", "INFO").strip().upper())
    if level < (threshold if isinstance(threshold, int) else logging.INFO):
        return  # vLLM's own level setting, read the way vLLM reads it, before vLLM applies it
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, args, None)
    _fallback_handler().handle(record)


def counter_line(kind: str) -> str:
    """One line of this process's counters, as JSON after a fixed prefix (easy to grep and to parse)."""
    return f"specguard counters ({kind}, pid {os.getpid()}): " + json.dumps(POLICY.snapshot(), sort_keys=True)


class _Lines:
    """Per-process state of the periodic and final lines."""

    def __init__(self) -> None:
        self.pid: int | None = None  # the process whose exit hook is armed
        self.final_logged_pid: int | None = None
        self.ticker: threading.Thread | None = None
        self.stop = threading.Event()


_lines = _Lines()


def _log_final() -> None:
    if _lines.pid != os.getpid() or _lines.final_logged_pid == os.getpid():
        return  # not armed in this process (a fork child vLLM did not load the plugin in), or done
    _lines.final_logged_pid = os.getpid()
    _lines.stop.set()
    with contextlib.suppress(Exception):  # shutdown must never fail because of the guard
        metrics.flush()
    with contextlib.suppress(Exception):
        emit(logging.INFO, "%s", counter_line("final"))


def _tick(interval: float | None, stop: threading.Event) -> None:
    """Write the metrics file every metrics.FLUSH_S (when the counters changed) and log a counter line every
    `interval` seconds."""
    step = metrics.FLUSH_S if interval is None else interval / math.ceil(interval / metrics.FLUSH_S)
    waited = 0.0
    while not stop.wait(step):
        waited += step
        try:
            if interval is not None and waited >= interval - 1e-9:
                waited = 0.0
                emit(logging.INFO, "%s", counter_line(f"every {interval:g}s"))
            # after the line, so /metrics scraped once the line is out counts at least what the line says
            metrics.flush()
        except Exception as exc:  # noqa: BLE001 -- a failure here is the guard's, never the server's
            POLICY.guard_error("stats", STATS_ENV, exc)


def arm(interval: float | None) -> None:
    """Start this process's counter lines: the periodic thread when asked for, and the final line at exit.
    The main process and spawned children run atexit; forked multiprocessing children leave through
    os._exit after running multiprocessing's finalizers, which their bootstrap clears first, so the finalizer
    is registered again after that clear (`register_after_fork`)."""
    pid = os.getpid()
    if _lines.pid == pid:
        return
    _lines.pid = pid
    _lines.stop = threading.Event()
    atexit.register(_log_final)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:
        _final_at_mp_exit(_lines)
        mp_util.register_after_fork(_lines, _final_at_mp_exit)
    _lines.ticker = threading.Thread(target=_tick, args=(interval, _lines.stop), name="specguard-stats", daemon=True)
    _lines.ticker.start()


def _final_at_mp_exit(lines: _Lines) -> None:
    sys.modules["multiprocessing.util"].Finalize(None, _log_final, exitpriority=10)


def disarm() -> None:
    """Stop the periodic line and forget the exit hook (tests; a process turning the guard off)."""
    _lines.stop.set()
    atexit.unregister(_log_final)
    _lines.pid = None
    _lines.ticker = None
