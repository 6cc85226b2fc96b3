"""What the evaluator learned from the blind SGLang sets (issue 29): a test through a one-line predicate helper
narrows what the helper tests, `hasattr` on code outside the tree is not known, a client is asked about the function
a `functools.partial` reaches, SG106's path-by-path runs read readiness written directly, skip keywords set on
some paths only, inherited methods and factories' callables, a flag or a rank count that says DP attention is on
is asked as a call is, a string compared by value is a bool, a class whose constructor refuses DP attention has
no instance to judge, a batch's copy carries what happened to it, a configuration field, a policy object and a
hook kept on the instance are settings, a partial of an unseen runner's method keeps its name, a generator's writes
are its caller's, the eager runner is a forward, and a plan in a `try` may raise on a path of its own. Each case is
SG106's own batch class with one idiom changed, the finding (or its absence) checked."""

from __future__ import annotations

import textwrap
from pathlib import Path

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
    # a setting kept on the instance from a configuration field and the DP test: with DP attention on it is False
    # whatever the field says (blind set 9) ...
    "setting_from_a_config_field_and_the_dp_test": (
        """
        class DraftWorker:
            def __init__(self, server_args):
                self.reuse_plan = server_args.speculative_num_steps > 1 and not server_args.enable_dp_attention

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if self.reuse_plan:
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... and from the configuration field alone it may be True
    "setting_from_a_config_field_alone": (
        """
        class DraftWorker:
            def __init__(self, server_args):
                self.reuse_plan = server_args.speculative_num_steps > 1

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                if self.reuse_plan:
                    forward_batch.mark_forward_metadata_ready()
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
    # a frozen policy object kept on the instance: its fields are what the mark is given (blind set 10) ...
    "policy_object_kept_on_the_instance": (
        """
        import dataclasses
        @dataclasses.dataclass(frozen=True)
        class PlanPolicy:
            replan_equivalent: bool = True
        DEFAULT_POLICY = PlanPolicy()
        class DraftWorker:
            def __init__(self):
                self.policy = DEFAULT_POLICY

            def draft_extend(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=self.policy.replan_equivalent)
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... and the same policy replaced with one that keeps the pre-pad plan
    "policy_object_replaced": (
        """
        import dataclasses
        @dataclasses.dataclass(frozen=True)
        class PlanPolicy:
            replan_equivalent: bool = True
        DEFAULT_POLICY = PlanPolicy()
        class DraftWorker:
            def __init__(self):
                self.policy = DEFAULT_POLICY

            def draft_extend(self, forward_batch: ForwardBatch):
                policy = dataclasses.replace(self.policy, replan_equivalent=False)
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=policy.replan_equivalent)
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
    # a hook installed after construction (None until then) that plans and marks (blind set 10)
    "hook_installed_later": (
        """
        import functools
        def preplan(backend, forward_batch):
            backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        class DraftWorker:
            def __init__(self):
                self.preplan_hook = None

            def install_hooks(self):
                backend = self.draft_runner.attn_backend
                self.preplan_hook = functools.partial(preplan, backend)

            def draft_extend(self, forward_batch: ForwardBatch):
                hook = self.preplan_hook
                if hook is not None:
                    hook(forward_batch)
                return self.draft_runner.forward(forward_batch)
        """,
        True,
    ),
    # a partial of a method of an object the evaluation cannot see into (a parameter's runner), which carries the
    # skip keyword, made by a factory (blind set 10)
    "factory_partial_of_an_unseen_runner": (
        """
        import functools
        def preplanned_forward(runner):
            return functools.partial(runner.forward, skip_attn_backend_init=True)
        def draft_extend(worker, forward_batch: ForwardBatch):
            run = preplanned_forward(worker.draft_runner)
            worker.draft_runner.attn_backend.init_forward_metadata(forward_batch)
            return run(forward_batch)
        """,
        True,
    ),
    # a generator that plans and marks the batch before each step it yields: its effects are the caller's (blind
    # set 10) ...
    "generator_plans_before_each_step": (
        """
        def planned_steps(runners, forward_batch):
            for step, runner in enumerate(runners):
                if not forward_batch.forward_mode.is_idle():
                    runner.attn_backend.init_forward_metadata(forward_batch)
                    forward_batch.mark_forward_metadata_ready()
                yield step, runner
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                outputs = []
                for _step, runner in planned_steps([self.first_runner, self.second_runner], forward_batch):
                    outputs.append(runner.forward(forward_batch).logits_output)
                return outputs
        """,
        True,
    ),
    # ... and one that plans without marking leaves the forward to plan again
    "generator_plans_unmarked": (
        """
        def planned_steps(runners, forward_batch):
            for step, runner in enumerate(runners):
                if not forward_batch.forward_mode.is_idle():
                    runner.attn_backend.init_forward_metadata(forward_batch)
                yield step, runner
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                outputs = []
                for _step, runner in planned_steps([self.first_runner, self.second_runner], forward_batch):
                    outputs.append(runner.forward(forward_batch).logits_output)
                return outputs
        """,
        False,
    ),
    # the model runner's eager runner is a forward of its own: it plans only where the batch's predicate says so
    # (blind sets 1 and 7 to 10) ...
    "eager_runner_after_the_plan_and_the_pad": (
        """
        class ForkModelRunner:
            def forward_preplanned(self, forward_batch: ForwardBatch):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                forward_batch.prepare_mlp_sync_batch(self)
                return self.eager_runner.execute(forward_batch)
        """,
        True,
    ),
    # ... and padded before the plan, it runs the batch it was planned for
    "eager_runner_after_the_pad_and_the_plan": (
        """
        class ForkModelRunner:
            def forward_preplanned(self, forward_batch: ForwardBatch):
                forward_batch.prepare_mlp_sync_batch(self)
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.eager_runner.execute(forward_batch)
        """,
        False,
    ),
    # a plan in a `try` whose `else` marks the batch so that a padded one is planned again: on the path where the
    # plan raised, nothing marked it (blind set 9) ...
    "plan_in_a_try_marked_replannable_in_its_else": (
        """
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                try:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                except RuntimeError:
                    pass
                else:
                    forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
                return self.draft_runner.forward(forward_batch)
        """,
        False,
    ),
    # ... and marked so that it is not
    "plan_in_a_try_marked_in_its_else": (
        """
        class DraftWorker:
            def draft_extend(self, forward_batch: ForwardBatch):
                try:
                    self.draft_attn_backend.init_forward_metadata(forward_batch)
                except RuntimeError:
                    pass
                else:
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


def test_a_file_that_plans_only_through_a_framework_helper_it_inherits_is_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The subclass's file names no plan and no predicate: it calls `_init_frozen_kv_metadata`, the SGLang method
    that plans and marks (the pack's `[batches] plan_helpers`; blind set 10's `ForkFrozenKVMTPDraftWorker`)."""
    from specguard.composition import check_paths
    from specguard.packs import load_pack

    base = BATCH + textwrap.dedent(
        """
        class FrozenWorker:
            def _init_frozen_kv_metadata(self, forward_batch: ForwardBatch):
                self.draft_attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
        """
    )
    worker = textwrap.dedent(
        """
        from fork.base import ForwardBatch, FrozenWorker

        class ForkWorker(FrozenWorker):
            def seed_forward(self, forward_batch: ForwardBatch):
                self._init_frozen_kv_metadata(forward_batch)
                return self.draft_model_runner.forward(forward_batch)
        """
    )
    (tmp_path / "fork").mkdir()
    (tmp_path / "fork" / "__init__.py").write_text("")
    (tmp_path / "fork" / "base.py").write_text(base)
    (tmp_path / "fork" / "worker.py").write_text(worker)
    pack = load_pack(builtin=("vllm", "sglang"))
    found = {(Path(f.path).name, f.code) for f in check_paths([tmp_path / "fork"], use_cache=False, pack=pack).findings}
    assert ("worker.py", "SG106") in found, found
