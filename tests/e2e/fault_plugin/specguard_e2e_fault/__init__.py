"""TEST ONLY: a vLLM general plugin that breaks the draft path's attention metadata on demand.

specguard's e2e tier installs it into its own venv to show that the runtime guard's G0 catches, inside a real
server, the desync of the first seed: a speculator handing the metadata build a token count that the query
layout does not account for. It does nothing unless SPECGUARD_E2E_FAULT names a trigger file; then, on every
draft-step metadata build of vLLM's V1 proposers (`SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata`,
the funnel of the EAGLE and draft-model proposers), it reads that file and, by its content, hands the
builders a broken copy of the `CommonAttentionMetadata`:

  pad     num_actual_tokens 4 higher than query_start_loc says (the seed's DP padding, 52 vs 48), with
          slot_mapping padded to match, as a padded batch's buffers are (PAD_SLOT_ID, -1, in the new rows)
  pad@N   the same, only in draft step N (draft_index N): a fault in one speculative step
  short   num_actual_tokens 2 lower than the tokens the requests own (a count smaller than real)
  shift   query_start_loc (host and device copies) shifted up by one: it no longer starts at 0
  desync  only the device copy of query_start_loc shifted (the host copy stays right)
  bucket  the seed's count where padding applies: num_actual_tokens raised to the next power of two, the
          size of the graph bucket (or the DP-agreed size) a padded descriptor carries, only in batches whose
          token count is not one already (a draft step of 5 or 9 tokens is broken, one of 1, 2, 4 or 8 is
          not); vLLM's CPU build runs eagerly and pads nothing itself
  stale@N the second seed's class, in draft step N only: seq_lens one lower than the step's own (the previous
          step's lengths, not advanced by the token the step adds); rows, counts and every other field right
  other   (or no file) the metadata goes through untouched

For benchmarks/guard_toggle.py, SPECGUARD_E2E_TOGGLE names a file whose content turns the guard on (`on`),
off (anything else) or to pass-through wrappers that check nothing (`pass`) in every process of a serving server
between the benchmark's rounds.

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
import threading

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


torch = None  # imported by register(), only when the plugin is enabled


def _padded(cam, tokens: int):
    """The metadata with `tokens` tokens, its slot_mapping padded with PAD_SLOT_ID (-1) to cover them."""
    slots = cam.slot_mapping
    if slots.shape[0] < tokens:
        slots = torch.cat([slots, slots.new_full((tokens - slots.shape[0],), -1)])
    return dataclasses.replace(cam, num_actual_tokens=tokens, slot_mapping=slots)


def _broken(cam, kind: str, draft_index: int):
    if kind == "pad" or kind == f"pad@{draft_index}":
        return _padded(cam, cam.num_actual_tokens + PADDING)
    if kind == "short":
        return dataclasses.replace(cam, num_actual_tokens=cam.num_actual_tokens - 2)
    if kind == "shift":
        return dataclasses.replace(
            cam, query_start_loc=cam.query_start_loc + 1, query_start_loc_cpu=cam.query_start_loc_cpu + 1
        )
    if kind == "desync":
        return dataclasses.replace(cam, query_start_loc=cam.query_start_loc + 1)
    if kind == f"stale@{draft_index}":
        return dataclasses.replace(cam, seq_lens=cam.seq_lens - 1)
    bucket = 1 << max(cam.num_actual_tokens - 1, 0).bit_length()
    if kind == "bucket" and bucket > cam.num_actual_tokens:
        return _padded(cam, bucket)
    return cam


def _announce(kind: str, cam, broken, draft_index: int) -> None:
    if kind in _logged_once:
        return
    _logged_once.add(kind)
    _log().warning(
        "%s: injecting %r into the draft metadata build (num_actual_tokens %d -> %d, query_start_loc_cpu %s -> %s, "
        "query_start_loc %s -> %s, draft step %d)",
        PREFIX,
        kind,
        cam.num_actual_tokens,
        broken.num_actual_tokens,
        cam.query_start_loc_cpu.tolist(),
        broken.query_start_loc_cpu.tolist(),
        cam.query_start_loc.tolist(),
        broken.query_start_loc.tolist(),
        draft_index,
    )


def _probe() -> None:
    if "probe" in _logged_once:
        return
    _logged_once.add("probe")
    loaded = sorted(name for name in sys.modules if name == "specguard" or name.startswith("specguard."))
    _log().info("%s probe (pid %d): specguard modules loaded: %s", PREFIX, os.getpid(), ",".join(loaded) or "none")


def register() -> None:
    _start_toggle()
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    global torch
    import torch
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    original = SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata
    if getattr(original, "_specguard_e2e_fault", False):
        return  # vLLM may load plugins more than once in a process

    def build_per_group_and_layer_attn_metadata(self, common_attn_metadata, draft_index=0):
        _probe()
        kind = _fault(path)
        broken = _broken(common_attn_metadata, kind, draft_index)
        if broken is not common_attn_metadata:
            _announce(kind, common_attn_metadata, broken, draft_index)
        return original(self, broken, draft_index)

    build_per_group_and_layer_attn_metadata._specguard_e2e_fault = True
    SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata = build_per_group_and_layer_attn_metadata


TOGGLE_ENV = "SPECGUARD_E2E_TOGGLE"
TOGGLE_POLL_S = 0.05


TOGGLE_STATES = ("on", "pass")  # anything else in the file is "off"


def _toggle_loop(path: str) -> None:
    """benchmarks/guard_toggle.py switches the guard in a serving process between its rounds: while the file
    says `on` the guard is installed as VLLM_SPECGUARD=1 installs it; while it says `pass` it is installed and
    then every function it patched is replaced by a pass-through wrapper (the interception alone, which the
    guard's clock cannot see); otherwise it is uninstalled. Each process acknowledges the state it is in through
    `<path>.<pid>`, after writing its counters at the switch (what the guard timed and checked so far) to
    `<path>.<pid>.counters`."""
    import json
    import time

    from specguard.runtime import install
    from specguard.runtime.policy import POLICY
    from specguard.runtime.reporting import parse_interval

    ack = f"{path}.{os.getpid()}"
    state = None
    while True:
        content = _fault(path)
        want = content if content in TOGGLE_STATES else "off"
        if want != state:
            install.uninstall()
            if want != "off":
                installed = install.install("raise", parse_interval(None))
                if want == "pass":
                    _pass_through(installed.patcher.patches)
            state = want
            for name, text in ((ack + ".counters", json.dumps(POLICY.snapshot())), (ack, state)):
                with open(name + ".tmp", "w") as f:
                    f.write(text)
                os.replace(name + ".tmp", name)
        time.sleep(TOGGLE_POLL_S)


def _pass_through(patches) -> None:
    """Each function, classmethod and staticmethod the guard patched, replaced by a wrapper that only calls what
    the class or module held before (uninstalling puts that back, as it does after the guard's own wrappers). An
    override the guard added where a class only inherited the name (its `__init_subclass__` hook, which runs when
    a class is defined, not per build) stays as the guard installed it."""
    for patch in patches:
        raw = patch.raw_original
        if isinstance(raw, (classmethod, staticmethod)):
            setattr(patch.owner, patch.name, type(raw)(_forwarding(raw.__func__)))
        elif callable(raw) and not isinstance(raw, type):
            setattr(patch.owner, patch.name, _forwarding(raw))


def _forwarding(original):
    def forward(*args, **kwargs):
        return original(*args, **kwargs)

    return forward


def _start_toggle() -> None:
    path = os.environ.get(TOGGLE_ENV)
    if path and "toggle" not in _logged_once:
        _logged_once.add("toggle")
        threading.Thread(target=_toggle_loop, args=(path,), name="e2e-guard-toggle", daemon=True).start()
