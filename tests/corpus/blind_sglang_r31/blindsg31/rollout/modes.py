"""Mode classes the rollout dispatcher keys its handlers on.

These are value objects, not SGLang ``ForwardMode`` members: a mode carries the
policy knobs for one phase of a rollout step (how many draft steps, whether the
pre-planned attention metadata may be re-planned by the forward after DP
padding, ...). ``functools.singledispatch`` picks the handler by class.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang.srt.model_executor.forward_batch_info import ForwardMode


@dataclass(frozen=True)
class RolloutMode:
    forward_mode: ForwardMode = ForwardMode.DECODE
    # Passed as ``replan_equivalent`` when the handler marks its batch.
    replan_after_pad: bool = False


@dataclass(frozen=True)
class DecodeMode(RolloutMode):
    forward_mode: ForwardMode = ForwardMode.DECODE
    num_steps: int = 3


@dataclass(frozen=True)
class DraftExtendMode(RolloutMode):
    forward_mode: ForwardMode = ForwardMode.DRAFT_EXTEND_V2
    # Draft extend is planned by the same backend object the forward uses, so
    # a post-pad re-plan is equivalent: opt in.
    replan_after_pad: bool = True


@dataclass(frozen=True)
class PrefillExtendMode(RolloutMode):
    forward_mode: ForwardMode = ForwardMode.EXTEND
    # Prompt-phase draft extend keeps its chunked-prefix metadata as planned.
    replan_after_pad: bool = False


@dataclass(frozen=True)
class TargetVerifyMode(RolloutMode):
    forward_mode: ForwardMode = ForwardMode.TARGET_VERIFY


@dataclass(frozen=True)
class MixedChunkMode(RolloutMode):
    forward_mode: ForwardMode = ForwardMode.MIXED


@dataclass(frozen=True)
class StepConfig:
    """Per-rollout-step knobs forwarded from the trainer config."""

    num_steps: int = 3
    topk: int = 1
    num_draft_tokens: int = 4
    pre_plan: bool = True
