"""Plugin registry: the lab picks the drafter (and how it pre-plans) by name.

``--speculative-algorithm LAB_BLOCK`` resolves through
``SpeculativeAlgorithm.register``; inside the worker the draft-extend planner
is chosen by the ``lab_draft_planner`` name from the experiment config.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable, Dict, Type

from sglang.srt.model_executor.forward_batch_info import ForwardBatch
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

logger = logging.getLogger(__name__)

_PRIMERS: Dict[str, Type["DraftPlanPrimer"]] = {}


def register_primer(name: str) -> Callable[[Type["DraftPlanPrimer"]], Type["DraftPlanPrimer"]]:
    def deco(cls):
        _PRIMERS[name] = cls
        return cls

    return deco


class DraftPlanPrimer:
    """Pre-plans a draft-extend batch outside ModelRunner.forward."""

    def __init__(self, backend):
        self.backend = backend

    @classmethod
    def for_algorithm(cls, name: str, backend) -> "DraftPlanPrimer":
        try:
            return _PRIMERS[name.lower()](backend)
        except KeyError:
            raise ValueError(f"unknown draft planner {name!r}; known: {sorted(_PRIMERS)}")

    def prime(self, forward_batch: ForwardBatch) -> None:
        raise NotImplementedError


@register_primer("block")
class BlockPlanPrimer(DraftPlanPrimer):
    # The block drafter plans several windows at once; a forward-path plan
    # would only cover the first.
    replan_after_pad = False

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — registry primer for the block drafter: plans on its backend, marks with replan_equivalent taken from the class attribute replan_after_pad
    # expect: SG106
    def prime(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(
            replan_equivalent=self.replan_after_pad
        )


@register_primer("chain")
class ChainPlanPrimer(DraftPlanPrimer):
    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — registry primer for chain drafts: plans on its backend, marks with replan_equivalent=True
    # expect: clean
    def prime(self, forward_batch: ForwardBatch) -> None:
        if forward_batch.forward_mode.is_idle():
            return
        self.backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=True)


class RegistryDrafter:
    """Picks the draft-extend planner by name and runs the draft forward."""

    def __init__(self, draft_runner: ModelRunner, planner_name: str = "chain"):
        self.draft_runner = draft_runner
        self.primer = DraftPlanPrimer.for_algorithm(
            planner_name, draft_runner.attn_backend
        )

    def draft_extend(self, forward_batch: ForwardBatch):
        self.primer.prime(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — planner chosen by name from a dict of lambdas ("chain", "tree", "eager"), then draft_runner.forward
    # expect: SG106
    def plan_and_run(self, name: str, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        planners = {
            "chain": lambda fb: (
                backend.init_forward_metadata(fb),
                fb.mark_forward_metadata_ready(replan_equivalent=True),
            ),
            "tree": lambda fb: (
                backend.init_forward_metadata(fb),
                fb.mark_forward_metadata_ready(),
            ),
            "eager": lambda fb: None,
        }
        if not forward_batch.forward_mode.is_idle():
            planners.get(name, planners["eager"])(forward_batch)
        return self.draft_runner.forward(forward_batch).logits_output

    # idiom: speculative/eagle_worker_common.py prepare_for_draft_extend — planner chosen by name from a dict of lambdas sharing one functools.partial(mark_forward_metadata_ready, replan_equivalent=True)
    # expect: clean
    def plan_and_run_partial(self, name: str, forward_batch: ForwardBatch):
        backend = self.draft_runner.attn_backend
        mark = functools.partial(
            forward_batch.mark_forward_metadata_ready, replan_equivalent=True
        )
        planners = {
            "chain": lambda: (backend.init_forward_metadata(forward_batch), mark()),
            "tree": lambda: (backend.init_forward_metadata(forward_batch), mark()),
            "eager": lambda: None,
        }
        if not forward_batch.forward_mode.is_idle():
            planners.get(name, planners["eager"])()
        return self.draft_runner.forward(forward_batch).logits_output


@SpeculativeAlgorithm.register("LAB_BLOCK", supports_overlap=True)
def _lab_block_factory(server_args):
    from blindsg33.spec.tree_draft import ClusterTreeDraftWorker

    return ClusterTreeDraftWorker
