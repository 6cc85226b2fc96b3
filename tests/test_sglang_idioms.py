"""What the evaluator learned from the blind SGLang sets (issue 29): a test through a one-line predicate helper
narrows what the helper tests, `hasattr` on code outside the tree is not known, a client is asked about the function
a `functools.partial` reaches, SG106's path-by-path runs read readiness written directly, skip keywords set on
some paths only, inherited methods and factories' callables, a flag or a rank count that says DP attention is on
is asked as a call is, a string compared by value is a bool, a class whose constructor refuses DP attention has
no instance to judge, and a batch's copy carries what happened to it. Each case is SG106's own batch class with one
idiom changed, the finding (or its absence) checked."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source_judged
from specguard.rules import load_rule

_BAD = textwrap.dedent(load_rule("SG106").bad)
BATCH = _BAD[: _BAD.index("class DraftWorker")]

IDIOMS = {
    # a mark under `not is_npu()`: `hasattr(torch, "npu")` is not known here, so both sides are read
    "hasattr_outside_the_tree": (
        """
        import torch
        def is_npu():
            if not hasattr(torch, "npu"):
                return False
            return torch.npu.is_available()

        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if not is_npu():
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
    # the forward reached through a partial that carries the skip keyword
    "partial_carries_the_skip_keyword": (
        """
        import functools
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                run = functools.partial(self.draft_runner.forward, skip_attn_backend_init=True)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                return run(forward_batch)
        """,
        True,
    ),
    # the skip keyword set in a dict on the path that planned
    "skip_keyword_on_some_paths": (
        """
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch, idle: bool):
                kwargs = {}
                if not idle:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                    kwargs["skip_attn_backend_init"] = True
                return self.draft_runner.forward(forward_batch, **kwargs)
        """,
        True,
    ),
    # the mark dropped by assigning the field, under a predicate helper that holds exactly where the batch pads
    "mark_dropped_where_padding_happens": (
        """
        def synchronised(batch):
            return batch.global_num_tokens_cpu is not None

        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                forward_batch.global_num_tokens_cpu = self.dp_counts  # per-rank counts, or None without DP
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                if synchronised(forward_batch):
                    forward_batch.forward_metadata_ready = False
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # the same batch kept marked where it pads: the helper's test narrows nothing away
    "mark_dropped_where_padding_does_not_happen": (
        """
        def synchronised(batch):
            return batch.global_num_tokens_cpu is not None

        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                forward_batch.global_num_tokens_cpu = self.dp_counts  # per-rank counts, or None without DP
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                if not synchronised(forward_batch):
                    forward_batch.forward_metadata_ready = False
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
    # a subclass's override of the mark, reached through the base class's method on `self`
    "inherited_method_with_an_overridden_mark": (
        """
        class Stepper:
            def _mark(self, forward_batch):
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)

            def run(self, forward_batch: ForwardBatch):
                self.backend.init_forward_metadata(forward_batch)
                self._mark(forward_batch)
                return self.model_runner.forward(forward_batch)

        class DraftWorker(Stepper):
            def _mark(self, forward_batch):
                forward_batch.mark_forward_metadata_ready()

            def draft_extend(self, forward_batch: ForwardBatch):
                return self.run(forward_batch)
        """,
        True,
    ),
    # a factory's partial of a forward that plans and marks, called where the batch is handed to it
    "factory_partial_of_a_planning_forward": (
        """
        import functools
        def _planned_forward(runner, backend, forward_batch):
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
            return runner.forward(forward_batch)

        def make_forward(runner, backend):
            return functools.partial(_planned_forward, runner, backend)

        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                step = make_forward(self.draft_runner, self.draft_attn_backend)
                return step(forward_batch)
        """,
        True,
    ),
    # a mark cleared where a flag says DP attention is on (blind set 8): the forward plans the padded batch again
    "mark_cleared_under_the_dp_attention_flag": (
        """
        from sglang.srt.runtime_context import get_parallel
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                if get_parallel().attn_dp_enabled:
                    forward_batch.forward_metadata_ready = False
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... and the mark kept only where the server argument says DP attention is off
    "mark_kept_only_without_dp_attention": (
        """
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if not self.server_args.enable_dp_attention:
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... where DP attention has one rank (blind set 9)
    "mark_kept_only_with_one_dp_attention_rank": (
        """
        from sglang.srt.runtime_context import get_parallel
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if get_parallel().attn_dp_size == 1:
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... and where a helper says an environment switch allows it and DP attention is off: a string compared by
    # value is a bool the evaluation cannot tell, so the helper's `allowed_by_env() and not dp_on()` is false
    # whichever it is (blind set 9)
    "mark_kept_where_the_environment_allows_it_without_dp_attention": (
        """
        import os
        from sglang.srt.layers.dp_attention import is_dp_attention_enabled
        def allowed_by_env():
            return os.environ.get("FORK_PREPLAN", "1") == "1"
        def preplan_allowed():
            return allowed_by_env() and not is_dp_attention_enabled()
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if preplan_allowed():
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # the environment switch alone: on the path where it allows it, the padded batch is not planned again
    "mark_kept_where_only_the_environment_allows_it": (
        """
        import os
        def allowed_by_env():
            return os.environ.get("FORK_PREPLAN", "1") == "1"
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if allowed_by_env():
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
    # a copy of the marked batch (`dataclasses.replace`) carries the plan and the mark (blind set 9) ...
    "marked_batch_copied": (
        """
        import dataclasses
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(dataclasses.replace(forward_batch, return_logprob=False))
        """,
        True,
    ),
    # ... and a copy with the mark cleared is planned again by the forward
    "marked_batch_copied_unmarked": (
        """
        import dataclasses
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                copied = dataclasses.replace(forward_batch, forward_metadata_ready=False)
                return self.draft_runner.forward(copied)
        """,
        False,
    ),
    # a worker whose constructor refuses DP attention: no instance of it runs where a batch is padded (blind set 9)
    "constructor_refuses_dp_attention": (
        """
        class DraftWorker:
            def __init__(self, server_args):
                if server_args.enable_dp_attention:
                    raise ValueError("this worker does not support --enable-dp-attention")
                self.server_args = server_args

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... and one whose constructor refuses something else runs with DP attention on
    "constructor_refuses_something_else": (
        """
        class DraftWorker:
            def __init__(self, server_args):
                if server_args.enable_nan_detection:
                    raise ValueError("this worker does not support --enable-nan-detection")
                self.server_args = server_args

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
}


@pytest.mark.parametrize("name", list(IDIOMS))
def test_an_sglang_idiom_is_judged_as_it_runs(name: str) -> None:
    text, flagged = IDIOMS[name]
    findings, _ = check_source_judged(BATCH + textwrap.dedent(text), "worker.py", "worker")
    codes = [f.code for f in findings]
    assert ("SG106" in codes) is flagged, (codes, [f.message for f in findings])
