"""What the guard does with a violation (raise or warn), and the counters behind `stats()`.

One process-wide Policy. Logging goes through vLLM's logger when vLLM is importable (so the lines carry
vLLM's format and process prefix), else the stdlib logger. Counters count every event. In warn mode each new
kind of violation at a site (what differs, without the numbers) is logged once, up to MAX_KINDS_LOGGED per
site; a violation that would read or write outside a buffer is stopped in warn mode too.
"""

from __future__ import annotations

import itertools
import logging
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

from specguard.runtime.errors import SpecGuardViolation, Violation

ENV_VAR = "VLLM_SPECGUARD"
SGLANG_ENV_VAR = "SGLANG_SPECGUARD"  # the same values, read by the SGLang plugin
OFF_VALUES = ("", "0", "off")
RAISE_VALUES = ("1", "raise")
WARN_VALUES = ("warn",)
VALID_VALUES = ("unset", *OFF_VALUES[1:], *RAISE_VALUES, *WARN_VALUES)
MAX_KINDS_LOGGED = 16  # per (check, site): a flood of distinct kinds is counted, not logged
WARN_STOP_NOTE = (
    "Stopped although the guard runs in warn mode: this build or launch would read or write outside its "
    "buffers, and handing it to the kernel risks memory corruption."
)


class SpecGuardConfigError(ValueError):
    """VLLM_SPECGUARD (or SGLANG_SPECGUARD) holds a value the guard does not know."""


def parse_mode(value: str | None, env_var: str = ENV_VAR) -> str:
    """Map the env var (VLLM_SPECGUARD, or SGLANG_SPECGUARD) to "off", "raise" or "warn"; anything else is a
    startup error."""
    if value is None:
        return "off"
    v = value.strip().lower()
    if v in OFF_VALUES:
        return "off"
    if v in RAISE_VALUES:
        return "raise"
    if v in WARN_VALUES:
        return "warn"
    valid = ", ".join(repr(x) if x != "unset" else "unset" for x in VALID_VALUES)
    raise SpecGuardConfigError(f"{env_var}={value!r} is not a valid value; use one of: {valid}")


def get_logger() -> logging.Logger:
    # Only use vLLM's logger when vLLM is already loaded: importing vllm just to log would break the
    # "nothing imported when off" promise for callers that never load vLLM.
    if "vllm" in sys.modules:
        try:
            from vllm.logger import init_logger

            # Under "vllm." so vLLM's handler, format and VLLM_LOGGING_LEVEL apply (its root logger
            # does not propagate).
            return init_logger("vllm.specguard")
        except Exception:  # noqa: BLE001 -- vLLM's logger unavailable: stdlib is fine
            pass
    return logging.getLogger("specguard.runtime")


class Site:
    """One guarded call site of one check. `hit()` counts a check run; it is on the hot path, so it is
    `next()` on an `itertools.count`, which is atomic under the GIL: exact under threads, without a lock."""

    __slots__ = ("check", "counter", "name", "ns")

    def __init__(self, check: str, name: str) -> None:
        self.check = check
        self.name = name
        self.counter = itertools.count()
        self.ns = 0  # the guard's own time at this site, where the adapter measures it (G0's builds)

    def hit(self) -> None:
        next(self.counter)

    @property
    def runs(self) -> int:
        return int(repr(self.counter)[len("count(") : -1])  # the next value it would yield = calls so far

    def reset(self) -> None:
        self.counter = itertools.count()
        self.ns = 0


@dataclass
class Policy:
    mode: str = "off"
    mode_reason: str = ""  # why the mode differs from what VLLM_SPECGUARD asked for (an unassessed vLLM or FlashInfer)
    violations: Counter = field(default_factory=Counter)  # (check, site) -> count
    recorded: Counter = field(default_factory=Counter)  # (check, site) -> disagreements noted, never raised
    skips: Counter = field(default_factory=Counter)  # (check, site, reason) -> count
    guard_errors: Counter = field(default_factory=Counter)  # (check, site) -> count
    sites: dict = field(default_factory=dict)  # (check, site) -> Site, whose runs count checks run
    _logged: set = field(default_factory=set)
    _kinds: dict = field(default_factory=dict)  # (check, site) -> kinds of violation logged there
    _lock: threading.Lock = field(default_factory=threading.Lock)
    logger: logging.Logger | None = None

    def _log(self) -> logging.Logger:
        if self.logger is None:
            self.logger = get_logger()
        return self.logger

    def _count(self, counter: Counter, key: tuple, log_key: tuple) -> bool:
        """Count `key` exactly (threads included); True the first time `log_key` is seen (log it then)."""
        with self._lock:
            counter[key] += 1
            if log_key in self._logged:
                return False
            self._logged.add(log_key)
            return True

    def site(self, check: str, name: str) -> Site:
        key = (check, name)
        site = self.sites.get(key)
        if site is None:
            with self._lock:
                site = self.sites.setdefault(key, Site(check, name))
        return site

    def report(self, violation: Violation | None) -> None:
        """Count a violation; raise it in raise mode. In warn mode log each new kind of it at its site once
        and let the build or launch proceed, unless it would touch memory outside its buffers: that one is
        logged and raised in warn mode too."""
        if violation is None:
            return
        key = (violation.check, violation.site)
        kind = violation.kind
        with self._lock:
            self.violations[key] += 1
            kinds = self._kinds.setdefault(key, set())
            new = kind not in kinds and len(kinds) < MAX_KINDS_LOGGED
            if new:
                kinds.add(kind)
        if self.mode == "raise":
            raise SpecGuardViolation(violation)
        if violation.out_of_bounds:
            self._log().error("%s %s", violation.message, WARN_STOP_NOTE)
            raise SpecGuardViolation(violation, note=WARN_STOP_NOTE)
        if new:
            last = len(kinds) == MAX_KINDS_LOGGED
            self._log().warning(
                "%s (warn mode: proceeds; this kind of %s violation at this site is logged once, every one is "
                "counted%s)",
                violation.message,
                violation.check,
                f"; {MAX_KINDS_LOGGED} kinds logged here, further kinds are only counted" if last else "",
            )

    def record(self, violation: Violation | None) -> None:
        """Count and log once a disagreement that must not change what vLLM decides: never raised, in
        any mode (the launch it could lead to is what a check stops)."""
        if violation is None:
            return
        key = (violation.check, violation.site)
        if self._count(self.recorded, key, ("recorded", *key)):
            self._log().warning(
                "%s (recorded, not raised: vLLM's own decision stands; further ones at this site are counted)",
                violation.message,
            )

    def skip(self, check: str, site: str, reason: str) -> None:
        """A check that could not run without a device read (or lacks its inputs): count, log once."""
        if self._count(self.skips, (check, site, reason), ("skip", check, site, reason)):
            self._log().info("specguard %s skipped at %s: %s (counted, logged once)", check, site, reason)

    def guard_error(self, check: str, site: str, exc: BaseException) -> None:
        """A bug or surprise inside the guard itself: never let it break serving."""
        if self._count(self.guard_errors, (check, site), ("error", check, site, type(exc).__name__)):
            self._log().warning(
                "specguard %s check at %s failed internally (%s: %s); launch proceeds unchecked",
                check,
                site,
                type(exc).__name__,
                exc,
            )

    def snapshot(self) -> dict[str, object]:
        def flat(counter: Counter) -> dict[str, int]:
            return {":".join(map(str, k)): v for k, v in sorted(counter.items())}

        with self._lock:
            return {
                "mode": self.mode,
                "violations": flat(self.violations),
                "recorded": flat(self.recorded),
                "skips": flat(self.skips),
                "guard_errors": flat(self.guard_errors),
                "checks_run": {f"{c}:{n}": s.runs for (c, n), s in sorted(self.sites.items()) if s.runs},
                "guard_ns": {f"{c}:{n}": s.ns for (c, n), s in sorted(self.sites.items()) if s.ns},
            }

    def reset_counters(self) -> None:
        with self._lock:
            for c in (self.violations, self.recorded, self.skips, self.guard_errors):
                c.clear()
            for site in self.sites.values():
                site.reset()
            self._logged.clear()
            self._kinds.clear()


POLICY = Policy()
