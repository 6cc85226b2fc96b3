"""Global knobs for the lab's speculative-decoding experiments.

Everything here is read at call time (the sweep scripts mutate these dicts in
place between runs), so do not cache values at import.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable, Dict, Optional

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.runtime_context import get_parallel, get_server_args
from sglang.srt.utils.common import require_mlp_sync

logger = logging.getLogger(__name__)

# --- EAGLE chain / tree drafting --------------------------------------------
SPEC_CFG: Dict[str, Any] = {
    "reuse_draft_plan": True,
    # Whether a pre-planned draft batch may be re-planned by the forward after
    # DP padding.  Left False: the multi-step wrapper plans are not
    # reproducible by the draft runner's own backend.
    "replan_after_pad": False,
    "eager_draft_extend": True,
    "tree_levels": 4,
    "tree_width": 2,
    "log_plans": bool(int(os.environ.get("BLINDSG_LOG_PLANS", "0"))),
}

# --- lookahead / n-gram ---------------------------------------------------
LOOKAHEAD_CFG: Dict[str, Any] = {
    "window": 8,
    "min_match": 2,
    "max_candidates": 16,
    "rescore_with_draft": True,
}

# --- speculative prefill --------------------------------------------------
SPEC_PREFILL_CFG: Dict[str, Any] = {
    "overlap_plan": True,
    "draft_tokens_during_prefill": 4,
    "use_plan_stream": True,
}

# --- adaptive step counts -------------------------------------------------
ADAPTIVE_CFG: Dict[str, Any] = {
    "candidate_steps": [1, 2, 3, 5],
    "ema": 0.8,
    "min_accept_rate": 0.35,
}

# Shared scratch for experiments that stage batches between scheduler ticks.
LOOKAHEAD_STATE: Dict[str, Any] = {"fb": None, "graph": False, "runner": None}


def dp_padding_possible(forward_batch: ForwardBatch) -> bool:
    """True when ModelRunner.forward will run prepare_mlp_sync_batch on it."""
    return getattr(forward_batch, "global_num_tokens_cpu", None) is not None


def dp_attention_on() -> bool:
    return bool(get_parallel().attn_dp_enabled)


def mlp_sync_on() -> bool:
    return bool(require_mlp_sync())


def log_plan(tag: str, forward_batch: ForwardBatch) -> None:
    if SPEC_CFG["log_plans"]:
        logger.info(
            "[%s] plan bs=%s tokens=%s mode=%s",
            tag,
            forward_batch.batch_size,
            None if forward_batch.input_ids is None else forward_batch.input_ids.shape[0],
            forward_batch.forward_mode,
        )


def server_flag(name: str, default: Any = None) -> Any:
    return getattr(get_server_args(), name, default)


def pick(cfg: Dict[str, Any], key: str, default: Any = None) -> Any:
    return cfg.get(key, default)


def compose(*fns: Callable) -> Callable:
    return functools.reduce(lambda f, g: lambda *a, **k: g(f(*a, **k)), fns)


def maybe(obj: Optional[Any], name: str, default: Any = None) -> Any:
    return default if obj is None else getattr(obj, name, default)
