"""Small value types passed between the drafter and the backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch


@dataclass(frozen=True)
class DraftShape:
    """Static draft geometry of one MTP worker."""

    num_steps: int
    topk: int
    num_draft_tokens: int

    @property
    def tokens_per_req(self) -> int:
        return self.topk

    @property
    def extend_width(self) -> int:
        return self.num_draft_tokens

    @classmethod
    def chain(cls, num_steps: int) -> "DraftShape":
        return cls(num_steps=num_steps, topk=1, num_draft_tokens=num_steps + 1)


@dataclass
class DraftBudget:
    """Per-request draft budgets (how many draft tokens a request may get)."""

    default: int
    per_request: Dict[str, int] = field(default_factory=dict)
    floor: int = 0

    def for_rid(self, rid: str) -> int:
        return max(self.floor, self.per_request.get(rid, self.default))

    def as_tensor(self, rids: List[str], device) -> torch.Tensor:
        return torch.tensor(
            [self.for_rid(r) for r in rids], dtype=torch.int32, device=device
        )

    def max_budget(self, rids: List[str]) -> int:
        return max((self.for_rid(r) for r in rids), default=self.default)

    @staticmethod
    def clamp(budgets: torch.Tensor, cap: int) -> torch.Tensor:
        return torch.clamp(budgets, min=0, max=cap)


@dataclass
class StepRecord:
    """What one draft step produced (kept for the acceptance statistics)."""

    step: int
    num_tokens: int
    planned_bs: Optional[int] = None
