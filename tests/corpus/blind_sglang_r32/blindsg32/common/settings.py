"""MTP drafting settings, read from server args / the runtime spec bag and
from the fork's environment flags."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from sglang.srt.runtime_context import get_spec

from blindsg32.common.env_flags import MTPEnv
from blindsg32.common.shapes import DraftShape


@dataclass(frozen=True)
class MTPDraftSettings:
    num_steps: int
    topk: int
    num_draft_tokens: int
    replan_after_pad: bool = False
    allow_dp_preplan: bool = True
    use_plan_stream: bool = True
    ngram_window: int = 4
    default_draft_budget: int = 3
    draft_backend: str = "trtllm_mla"

    @property
    def shape(self) -> DraftShape:
        return DraftShape(self.num_steps, self.topk, self.num_draft_tokens)

    @classmethod
    def from_server_args(cls, server_args: Any) -> "MTPDraftSettings":
        num_steps = int(server_args.speculative_num_steps or 1)
        return cls(
            num_steps=num_steps,
            topk=int(server_args.speculative_eagle_topk or 1),
            num_draft_tokens=int(
                server_args.speculative_num_draft_tokens or (num_steps + 1)
            ),
            draft_backend=getattr(
                server_args, "speculative_draft_attention_backend", None
            )
            or "trtllm_mla",
        ).with_env()

    @classmethod
    def from_spec_context(cls) -> "MTPDraftSettings":
        spec = get_spec()
        num_steps = int(spec.speculative_num_steps or 1)
        return cls(
            num_steps=num_steps,
            topk=int(spec.speculative_eagle_topk or 1),
            num_draft_tokens=int(spec.speculative_num_draft_tokens or num_steps + 1),
        ).with_env()

    def with_env(self) -> "MTPDraftSettings":
        return replace(
            self,
            replan_after_pad=MTPEnv.REPLAN_AFTER_PAD.get(),
            allow_dp_preplan=MTPEnv.ALLOW_DP_PREPLAN.get(),
            use_plan_stream=MTPEnv.USE_PLAN_STREAM.get(),
            ngram_window=MTPEnv.NGRAM_WINDOW.get(),
            default_draft_budget=MTPEnv.DEFAULT_DRAFT_BUDGET.get(),
        )

    def override(self, **kwargs: Optional[Any]) -> "MTPDraftSettings":
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})
