"""Serving config and the strategy factory.

The storefront fleet runs DeepSeek-style MTP / EAGLE-3 heads and a small
standalone draft model behind DP attention.  Everything the strategies need
from :class:`ServerArgs` is copied once into a frozen :class:`SpecServingConfig`
so the hot path never touches the (resolving) server-args view again.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Callable, Dict, Type

from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import require_mlp_sync

if TYPE_CHECKING:
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    from blindsg35.serving.strategies.base import BaseDraftStrategy

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SpecServingConfig:
    algorithm: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    # True when attention runs data parallel (the deprecated flag or an
    # attn-DP width above one).
    dp_attention: bool
    # True when the scheduler stamps global token counts on every batch, i.e.
    # ModelRunner._forward_raw will pad through prepare_mlp_sync_batch.
    mlp_sync: bool
    dcp_size: int
    disable_cuda_graph: bool

    @classmethod
    def from_server_args(cls, server_args: ServerArgs) -> "SpecServingConfig":
        dp_attention = bool(server_args.enable_dp_attention) or (
            (server_args.attn_dp_size or 1) > 1
        )
        return cls(
            algorithm=(server_args.speculative_algorithm or "").upper(),
            num_steps=server_args.speculative_num_steps or 0,
            topk=server_args.speculative_eagle_topk or 1,
            num_draft_tokens=server_args.speculative_num_draft_tokens or 1,
            dp_attention=dp_attention,
            mlp_sync=require_mlp_sync(),
            dcp_size=server_args.dcp_size,
            disable_cuda_graph=bool(server_args.disable_cuda_graph),
        )


_STRATEGIES: Dict[str, Type["BaseDraftStrategy"]] = {}


def register_strategy(*names: str) -> Callable[[Type], Type]:
    def _register(cls: Type) -> Type:
        for name in names:
            _STRATEGIES[name] = cls
        return cls

    return _register


def _ensure_registered() -> None:
    # Import for the registration side effect only.
    from blindsg35.serving.strategies import eagle3, frozen_kv, standalone  # noqa: F401


def select_draft_strategy(
    server_args: ServerArgs, worker: "EagleDraftWorker"
) -> "BaseDraftStrategy":
    _ensure_registered()
    cfg = SpecServingConfig.from_server_args(server_args)
    key = cfg.algorithm
    if key == "EAGLE3" and cfg.topk > 1:
        key = "EAGLE3_TREE"
    try:
        strategy_cls = _STRATEGIES[key]
    except KeyError:
        raise ValueError(
            f"no storefront draft strategy for speculative_algorithm={cfg.algorithm!r}"
        ) from None
    logger.info(
        "draft strategy %s (dp_attention=%s, mlp_sync=%s)",
        strategy_cls.__name__,
        cfg.dp_attention,
        cfg.mlp_sync,
    )
    return strategy_cls(worker, cfg)
