"""TEST ONLY: a vLLM general plugin that breaks the draft path's attention metadata on demand.

specguard's e2e tier installs it into its own venv to show that the runtime guard's G0 catches, inside a real
server, the desync of the first seed: a speculator handing the metadata build a token count that the query
layout does not account for. It does nothing unless SPECGUARD_E2E_FAULT names a trigger file; then, on every
draft-step metadata build of vLLM's V1 proposers (`SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata`,
the funnel of the EAGLE and draft-model proposers), it reads that file and, by its content, hands the
builders a broken copy of the `CommonAttentionMetadata`:

  pad    num_actual_tokens 4 higher than query_start_loc says (the seed's DP padding, 52 vs 48)
  shift  query_start_loc (host and device copies) shifted up by one: it no longer starts at 0
  other  (or no file) the metadata goes through untouched

The trigger is a file, not an environment variable, so one server can serve healthy requests first and
faulty ones after. The variable's name does not start with VLLM_, so vLLM's environment validation never
sees it.

At its first draft build in a process it also logs a probe line: which specguard modules that process has
loaded. With VLLM_SPECGUARD unset the guard must have loaded none of its installing code (nothing patched).
Its lines start with "e2e-fault-plugin", so the tests can tell them from the guard's own.
"""

from __future__ import annotations

import dataclasses
import os
import sys

ENV_VAR = "SPECGUARD_E2E_FAULT"
PADDING = 4
PREFIX = "e2e-fault-plugin"
_logged_once: set[str] = set()  # "probe" and the fault kinds announced in this process


def _log():
    from vllm.logger import init_logger

    return init_logger("vllm.e2e_fault_plugin")


def _fault(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _broken(cam, kind: str):
    if kind == "pad":
        return dataclasses.replace(cam, num_actual_tokens=cam.num_actual_tokens + PADDING)
    if kind == "shift":
        return dataclasses.replace(
            cam, query_start_loc=cam.query_start_loc + 1, query_start_loc_cpu=cam.query_start_loc_cpu + 1
        )
    return cam


def _announce(kind: str, cam, broken) -> None:
    if kind in _logged_once:
        return
    _logged_once.add(kind)
    _log().warning(
        "%s: injecting %r into the draft metadata build (num_actual_tokens %d -> %d, query_start_loc_cpu %s -> %s)",
        PREFIX,
        kind,
        cam.num_actual_tokens,
        broken.num_actual_tokens,
        cam.query_start_loc_cpu.tolist(),
        broken.query_start_loc_cpu.tolist(),
    )


def _probe() -> None:
    if "probe" in _logged_once:
        return
    _logged_once.add("probe")
    loaded = sorted(name for name in sys.modules if name == "specguard" or name.startswith("specguard."))
    _log().info("%s probe (pid %d): specguard modules loaded: %s", PREFIX, os.getpid(), ",".join(loaded) or "none")


def register() -> None:
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    original = SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata
    if getattr(original, "_specguard_e2e_fault", False):
        return  # vLLM may load plugins more than once in a process

    def build_per_group_and_layer_attn_metadata(self, common_attn_metadata, draft_index=0):
        _probe()
        kind = _fault(path)
        broken = _broken(common_attn_metadata, kind)
        if broken is not common_attn_metadata:
            _announce(kind, common_attn_metadata, broken)
        return original(self, broken, draft_index)

    build_per_group_and_layer_attn_metadata._specguard_e2e_fault = True
    SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata = build_per_group_and_layer_attn_metadata
