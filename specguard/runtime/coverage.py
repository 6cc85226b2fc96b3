"""Which checks can fire on which vLLM release: live, a regression net, or recorded only.

A regression net is a check whose disagreement that release's own code cannot produce (the code it guards
was fixed there, or the path does not exist); it stays installed for the releases where it bites and for
forks that reintroduce the bug. Read from vLLM 0.28.0-0.33.0's code; the reasons cite what makes each net.

ASSESSED is the one place that says what the guard was assessed on: the vLLM minors and the flashinfer-python
releases whose code its invariants, nets, signatures and dtype tables were read against. On anything else raise
mode runs as warn (install.effective_mode).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Minor = tuple[int, int]


@dataclass(frozen=True)
class Assessed:
    vllm: tuple[Minor, Minor]  # the first and last vLLM minor, both included (any patch release of them)
    flashinfer: tuple[str, ...]  # flashinfer-python releases, exactly: a patch release can rename what G1/G2 wrap


ASSESSED = Assessed(
    vllm=((0, 28), (0, 33)),
    # 0.7.4 against 0.7.2.post1: the same public MLA decode signature (33 parameters) and integer-operand rules
    # (block_tables/seq_lens read as int32 by the kernel launcher, cum_seq_lens_q and causal_seqlens_kv_global
    # checked int32), the same DCP contract, the same paged wrappers' run() and decode plan(), prefill plan() one
    # keyword added last; the private function behind the MLA entry renamed (tests/runtime/test_flashinfer_surface.py).
    flashinfer=("0.7.2.post1", "0.7.4"),
)


@dataclass(frozen=True)
class Part:
    name: str
    adapter: str  # the install.ADAPTERS key whose install it needs
    nets: tuple[tuple[Minor, Minor, str], ...] = ()  # (first, last release, why it cannot fire there)
    record_only: bool = False


PARTS = (
    Part("G0 metadata boundary", "G0"),
    Part("G1 FlashInfer paged wrappers", "G1"),
    Part(
        "G1 MLA query rows",
        "MLA",
        (((0, 28), (0, 33), "MLACommonImpl slices the query to num_decode_tokens before forward_mqa"),),
    ),
    Part("G2 MLA launch geometry", "MLA"),
    Part(
        "G2 DCP global causal bound",
        "MLA",
        (
            ((0, 28), (0, 28), "forward_mqa passes no DCP operands"),
            ((0, 29), (0, 33), "forward_mqa expands the bound with block_table/seq_lens"),
        ),
    ),
    Part(
        "G2 ragged decode under DCP",
        "MLA",
        (((0, 28), (0, 30), "the MLA builder declares uniform query lengths, so a ragged request is no decode"),),
    ),
    Part("G3 layer causality", "MLA"),
    Part(
        "G3 non-causal DCP support",
        "MLA",
        (((0, 29), (0, 33), "the builder declares supports_non_causal_multi_token_dcp"),),
    ),
    Part("G3 KV-group merge", "G3", record_only=True),
    Part(
        "G4 draft token count",
        "G4",
        (((0, 30), (0, 33), "the shared helper already hands the real count outside FULL graphs"),),
    ),
    Part("G5 draft lengths", "G0"),
)


def minor_version(version: str) -> Minor | None:
    """(0, 32) for "0.32.0", "0.32.0+cpu" or "0.32.1rc1"; None when it does not start with a release."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Coverage:
    assessed: bool
    live: list[str]
    nets: list[str]  # "name (why)"
    recorded: list[str]


def assessed(vllm_version: str) -> bool:
    """Whether the release is one this guard's invariants and nets were read against."""
    minor = minor_version(vllm_version)
    return minor is not None and ASSESSED.vllm[0] <= minor <= ASSESSED.vllm[1]


def flashinfer_assessed(flashinfer_version: str) -> bool:
    """Whether this flashinfer-python is one the FlashInfer checks (G1's wrappers, G2's kernel entry and dtype
    table) were read against."""
    return flashinfer_version in ASSESSED.flashinfer


def vllm_range() -> str:
    """The assessed vLLM minors as the startup line writes them: "0.28-0.33"."""
    (a, b), (c, d) = ASSESSED.vllm
    return f"{a}.{b}-{c}.{d}"


def coverage(vllm_version: str, installed_adapters: set[str]) -> Coverage:
    minor = minor_version(vllm_version)
    is_assessed = assessed(vllm_version)
    live: list[str] = []
    nets: list[str] = []
    recorded: list[str] = []
    for part in PARTS:
        if part.adapter not in installed_adapters:
            continue
        if part.record_only:
            recorded.append(part.name)
            continue
        why = _net_reason(part, minor) if is_assessed and minor is not None else None
        if why is None:
            live.append(part.name)
        else:
            nets.append(f"{part.name} ({why})")
    return Coverage(is_assessed, live, nets, recorded)


def _net_reason(part: Part, minor: Minor) -> str | None:
    return next((why for first, last, why in part.nets if first <= minor <= last), None)


def describe(vllm_version: str, cov: Coverage) -> str:
    """The startup line's clause on what can fire on this vLLM."""
    if not cov.assessed:
        return (
            f"on vLLM {vllm_version} (not assessed: the table covers {vllm_range()}) every installed check is treated "
            f"as live [{', '.join(cov.live) or 'none'}]; recorded only [{', '.join(cov.recorded) or 'none'}]"
        )
    return (
        f"on vLLM {vllm_version}: live [{', '.join(cov.live) or 'none'}]; regression nets, which this release's "
        f"code cannot trip [{'; '.join(cov.nets) or 'none'}]; recorded only, never raised "
        f"[{', '.join(cov.recorded) or 'none'}]"
    )
