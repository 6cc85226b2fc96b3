"""The engines the guard runs in, as data: the variables that turn it on, the distribution whose version decides
whether raise mode may raise, and the adapters installed there. The invariants are the same for all of them."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.runtime import coverage
from specguard.runtime.policy import ENV_VAR, SGLANG_ENV_VAR

# (key, label, module): the key names the adapter in coverage.PARTS (vLLM) and in the startup line
Adapter = tuple[str, str, str]


@dataclass(frozen=True)
class Framework:
    name: str  # as the startup line writes it
    dist: str  # the distribution (and top-level module) whose release is checked against `assessed`
    env_var: str  # off/raise/warn
    stats_env: str  # seconds between counter lines
    adapters: tuple[Adapter, ...]
    assessed: tuple[str, ...]  # releases (vLLM: minors, see coverage.ASSESSED) the adapters were read against

    def is_assessed(self, version: str) -> bool:
        if self.dist == "vllm":
            return coverage.assessed(version)
        return version in self.assessed

    def assessed_range(self) -> str:
        return coverage.vllm_range() if self.dist == "vllm" else ", ".join(self.assessed)


FLASHINFER_WRAPPERS: Adapter = ("G1", "G1 FlashInfer paged wrappers", "specguard.runtime.adapt_flashinfer")

VLLM = Framework(
    name="vLLM",
    dist="vllm",
    env_var=ENV_VAR,
    stats_env="VLLM_SPECGUARD_STATS_INTERVAL",
    adapters=(
        ("G0", "G0 attention-metadata builders", "specguard.runtime.adapt_metadata"),
        FLASHINFER_WRAPPERS,
        ("MLA", "G1/G2/G3 FlashInfer MLA backend", "specguard.runtime.adapt_mla"),
        ("G3", "G3 KV-cache group merge", "specguard.runtime.adapt_kvspec"),
        ("G4", "G4 draft metadata helper", "specguard.runtime.adapt_speculator"),
    ),
    assessed=(),
)

# SGLang 0.5.23 is the release whose pre-plan/mark/pad/forward path (ForwardBatch's plan record and its
# needs_forward_metadata_init) and FlashInfer planners G6 and G1 were read against.
SGLANG = Framework(
    name="SGLang",
    dist="sglang",
    env_var=SGLANG_ENV_VAR,
    stats_env="SGLANG_SPECGUARD_STATS_INTERVAL",
    adapters=(("G6", "G6 pre-planned batch", "specguard.runtime.adapt_sglang"), FLASHINFER_WRAPPERS),
    assessed=("0.5.23",),
)
