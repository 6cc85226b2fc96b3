"""Experiment configs for the speculative-decoding lab (nested dicts)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, Dict

EXPERIMENTS: Dict[str, Dict[str, Any]] = {
    "tree_v1": {
        "draft": {"topk": 4, "steps": 3, "max_len": 8, "min_len": 2, "heads": 0},
        "planning": {"replan_equivalent": False, "skip_init": True},
    },
    "tree_v2": {
        "draft": {"topk": 4, "steps": 3, "max_len": 8, "min_len": 2, "heads": 0},
        "planning": {"replan_equivalent": True, "skip_init": False},
    },
    "medusa_small": {
        "draft": {"topk": 1, "steps": 4, "max_len": 6, "min_len": 1, "heads": 4},
        "planning": {"replan_equivalent": False, "skip_init": True},
    },
}


def _to_ns(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _to_ns(v) for k, v in value.items()})
    return value


def load_experiment(name: str) -> SimpleNamespace:
    return _to_ns(copy.deepcopy(EXPERIMENTS[name]))


def mark_kwargs(name: str) -> Dict[str, Any]:
    """Keyword arguments for ForwardBatch.mark_forward_metadata_ready."""
    return {"replan_equivalent": EXPERIMENTS[name]["planning"]["replan_equivalent"]}


def forward_kwargs(name: str) -> Dict[str, Any]:
    """Keyword arguments the lab passes to ModelRunner.forward."""
    return {"skip_attn_backend_init": EXPERIMENTS[name]["planning"]["skip_init"]}
