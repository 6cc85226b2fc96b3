"""What blind SGLang sets 12 to 14 showed (issue 29), and sets 1, 8 and 9's metadata stores, each case written as
that set's backend or worker is and its finding (or its absence) checked:
- a test that fails as an `and` whose other operands hold narrows its one undecided operand (a refusal of a
  multi-token query without the bound, passed: the bound is set);
- a launch reached through another function of the file that holds the bad lengths and reports them itself is
  that function's finding, not its caller's;
- a fork's override of the updater method SGLang's FlashInfer MLA backend reaches through `update` is judged with
  what the backend hands `update` (the batch's whole lengths);
- FlashInfer 0.7.4's canonical plan form (`plan(metadata=MLAPlanMetadata.csr(...))`) and a plan bound with
  `functools.partial` are plans;
- a class-level flag that no method assigns is what the instance reads (a subclass's `True` over its base's);
- a helper object built in another module whose method plans and marks the batch is read;
- (set 14) the model runner's own padding step before a plan pads the batch; a batch a field declares, filled by
  another method, is one batch; a dataclass's `__post_init__` that plans makes its builders judged;
- the field SGLang's MLA decode launches with under DCP (`metadata.seq_lens_k`) left holding the whole lengths is a
  finding where the function leaves it, judged path by path with each question a path asked answered alike."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_paths, check_source, check_source_judged
from specguard.packs import load_pack
from tests.conftest import check_fork_beside_sglang
from tests.test_sglang_idioms import BATCH

REFUSAL = """
import flashinfer
from sglang.srt.runtime_context import get_parallel

class StrictBackend:
    def forward_extend(self, q, kv_cache, forward_batch, metadata, layer, causal_seqs=None):
        bs = forward_batch.batch_size
        query = q.view(bs, 2, layer.tp_q_head_num, layer.head_dim)
        parallel = get_parallel()
        q_len = query.shape[1]
        REFUSE
        if parallel.dcp_enabled and causal_seqs is not None:
            return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
                query=query, kv_cache=kv_cache, seq_lens=metadata.seq_lens_k,
                causal_seqlens_kv_global=causal_seqs, return_lse=True,
            )
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, seq_lens=metadata.seq_lens_k
        )
"""


@pytest.mark.parametrize(
    ("refusal", "flagged"),
    [
        (
            "if parallel.dcp_enabled and q_len > 1 and causal_seqs is None:\n            raise NotImplementedError",
            False,
        ),
        ("pass", True),
    ],
    ids=["refused", "not refused"],
)
def test_a_failed_and_narrows_its_one_open_operand(refusal: str, flagged: bool) -> None:
    """Past `if dcp and q_len > 1 and causal_seqs is None: raise`, with DCP on and two tokens, the bound is set."""
    codes = [f.code for f in check_source(textwrap.dedent(REFUSAL).replace("REFUSE", refusal))]
    assert codes == (["SG203"] if flagged else []), codes


DELEGATING = """
import flashinfer
from sglang.srt.runtime_context import get_parallel

class ForkBackend:
    def _forward_decode_dcp(self, query, kv_cache, forward_batch):
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, seq_lens=forward_batch.seq_lens, return_lse=True
        )

    def decode_dcp_off(self, query, kv_cache, forward_batch, metadata):
        if get_parallel().dcp_enabled:
            return self._forward_decode_dcp(query, kv_cache, forward_batch)
        return flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(
            query=query, kv_cache=kv_cache, seq_lens=metadata.seq_lens_k
        )
"""


def test_a_launch_through_a_function_that_reports_it_is_that_functions_finding() -> None:
    """Blind set 12's `decode_dcp_off`: the whole lengths are read, and launched, in the override it delegates to."""
    found = check_source(textwrap.dedent(DELEGATING))
    assert [(f.code, f.symbol) for f in found] == [("SG203", "ForkBackend._forward_decode_dcp")], found


UPDATER = """
import torch
from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMLAIndicesUpdaterDecode
from sglang.srt.layers.dcp.layout import filter_dcp_local_kv_indices, get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class ForkUpdater(FlashInferMLAIndicesUpdaterDecode):
    def call_begin_forward(
        self, wrapper, paged_kernel_lens, paged_kernel_lens_sum, q_indptr, kv_indptr,
        init_metadata_replay=False, spec_info=None, *, plan, req_pool_indices, **fast_decode_kwargs,
    ):
        bs = len(paged_kernel_lens)
        kv_lens = LENS
        kv_indices = torch.empty(paged_kernel_lens_sum, dtype=torch.int32, device="cuda")
        if get_parallel().dcp_enabled:
            kv_indices = filter_dcp_local_kv_indices(kv_indices)
        wrapper.plan(
            q_indptr[: bs + 1], kv_indptr[: bs + 1], kv_indices, kv_lens, self.num_local_heads,
            self.kv_lora_rank, self.qk_rope_head_dim, 1, False, self.scaling, self.data_type, self.data_type,
        )
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [
        ("paged_kernel_lens.to(torch.int32)", True),
        ("get_dcp_lens(paged_kernel_lens, get_parallel().dcp_size, get_parallel().dcp_rank)", False),
    ],
    ids=["whole", "share"],
)
def test_an_updater_override_is_judged_with_what_the_backend_hands_update(
    tmp_path: Path, lens: str, flagged: bool
) -> None:
    """SGLang 0.5.23's `FlashInferMLAAttnBackend.init_forward_metadata` calls
    `self.indices_updater_decode.update(forward_batch.seq_lens, ...)`, which hands them on to `call_begin_forward`
    (blind sets 9 to 13)."""
    result = check_fork_beside_sglang(tmp_path, {"updater.py": textwrap.dedent(UPDATER).replace("LENS", lens)})
    decided = [(f.code, f.symbol) for f in result.findings]
    assert decided == ([("SG203", "ForkUpdater.call_begin_forward")] if flagged else []), decided
    if flagged:
        assert "as `FlashInferMLAIndicesUpdaterDecode.update` calls it from `FlashInferMLAAttnBackend." in (
            result.findings[0].message
        )
    assert not result.undecided, result.undecided


PLANS = """
import functools
import torch
from flashinfer.mla import MLAPlanMetadata
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class ForkBackend:
    def plan_decode(self, forward_batch, qo_indptr, kv_indptr, kv_indices):
        bs = forward_batch.batch_size
        parallel = get_parallel()
        kv_lens = forward_batch.seq_lens[:bs].to(torch.int32)
        if parallel.dcp_enabled:
            kv_lens = SHARE
        PLAN
"""
CANONICAL = (
    "self.decode_wrapper.plan(metadata=MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_lens), "
    "num_heads=16, head_dim_ckv=512, head_dim_kpe=64, page_size=1, causal=False, sm_scale=1.0, "
    "q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)"
)
PARTIAL = (
    "plan = functools.partial(self.decode_wrapper.plan, kv_len_arr=kv_lens, num_heads=16, head_dim_ckv=512, "
    "head_dim_kpe=64, page_size=1, causal=False, sm_scale=1.0, q_data_type=torch.bfloat16, "
    "kv_data_type=torch.bfloat16)\n        plan(qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices)"
)


@pytest.mark.parametrize("plan", [CANONICAL, PARTIAL], ids=["metadata form", "partial"])
@pytest.mark.parametrize(
    ("share", "flagged"),
    [("kv_lens", True), ("get_dcp_lens(kv_lens, parallel.dcp_size, parallel.dcp_rank)", False)],
    ids=["whole", "share"],
)
def test_a_plan_in_the_metadata_form_or_through_a_partial_is_a_plan(plan: str, share: str, flagged: bool) -> None:
    """Blind set 13's `plan_decode_canonical` and `plan_decode_partial`."""
    source = textwrap.dedent(PLANS).replace("SHARE", share).replace("PLAN", plan)
    codes = [f.code for f in check_source(source)]
    assert codes == (["SG203"] if flagged else []), codes


FLAGGED_WORKERS = """
class DraftWorker:
    replan_equivalent_draft: bool = False

    def draft_extend(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=self.replan_equivalent_draft)
        return self.draft_runner.forward(forward_batch)

class ReplanningDraftWorker(DraftWorker):
    replan_equivalent_draft: bool = True

    def draft_extend_replanning(self, forward_batch: ForwardBatch):
        self.draft_attn_backend.init_forward_metadata(forward_batch)
        forward_batch.mark_forward_metadata_ready(replan_equivalent=self.replan_equivalent_draft)
        return self.draft_runner.forward(forward_batch)
"""


def test_a_class_level_flag_no_method_assigns_is_what_the_instance_reads() -> None:
    """Blind set 13's `ReplanningEagleDraftWorker`: its `True` over the base's `False`."""
    findings, _ = check_source_judged(BATCH + textwrap.dedent(FLAGGED_WORKERS), "worker.py", "worker")
    assert [(f.code, f.symbol) for f in findings] == [("SG106", "DraftWorker.draft_extend")], findings


def test_a_helper_object_of_another_module_that_plans_is_read(tmp_path: Path) -> None:
    """Blind set 13's `draft_extend_from_plan`: `DraftExtendPlan(batch, backend).prime()` plans and marks. (The
    file is read because another of its methods plans: a file whose text names no plan at all is not, see
    docs/sglang.md's limits.)"""
    helper = BATCH + textwrap.dedent(
        """
        class DraftExtendPlan:
            def __init__(self, forward_batch, backend, replan_equivalent=False):
                self.forward_batch, self.backend, self.replan_equivalent = forward_batch, backend, replan_equivalent

            def prime(self):
                self.backend.init_forward_metadata(self.forward_batch)
                self.forward_batch.mark_forward_metadata_ready(replan_equivalent=self.replan_equivalent)
                return self.forward_batch
        """
    )
    worker = textwrap.dedent(
        """
        from fork.planning import DraftExtendPlan, ForwardBatch

        class ForkWorker:
            def draft_extend_from_plan(self, forward_batch: ForwardBatch):
                return self.draft_runner.forward(DraftExtendPlan(forward_batch, self.backend).prime())

            def draft_extend_from_equivalent_plan(self, forward_batch: ForwardBatch):
                plan = DraftExtendPlan(forward_batch, self.backend, replan_equivalent=True)
                return self.draft_runner.forward(plan.prime())

            def draft_extend_replanned(self, forward_batch: ForwardBatch):
                self.backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
                return self.draft_runner.forward(forward_batch)
        """
    )
    (tmp_path / "fork").mkdir()
    (tmp_path / "fork" / "__init__.py").write_text("")
    (tmp_path / "fork" / "planning.py").write_text(helper)
    (tmp_path / "fork" / "worker.py").write_text(worker)
    result = check_paths([tmp_path / "fork"], use_cache=False, pack=load_pack(builtin=("vllm", "sglang")))
    found = [(Path(f.path).name, f.symbol) for f in result.findings if f.code == "SG106"]
    assert found == [("worker.py", "ForkWorker.draft_extend_from_plan")], found


KEPT_LENGTHS = """
import torch
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class DecodeMetadata:
    seq_lens_k = None
    global_seq_lens_k = None

class ForkBackend:
    def init_forward_metadata(self, forward_batch):
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle() or mode.is_target_verify():
            metadata = DecodeMetadata()
            seq_lens = forward_batch.seq_lens
            if mode.is_target_verify():
                metadata.seq_lens_k = (seq_lens + 2).to(torch.int32)
            elif mode.is_decode_or_idle():
                metadata.seq_lens_k = seq_lens.to(torch.int32)
            if get_parallel().dcp_enabled:
                if (LOCALIZED) and metadata.seq_lens_k is not None:
                    metadata.global_seq_lens_k = metadata.seq_lens_k
                    metadata.seq_lens_k = get_dcp_lens(metadata.global_seq_lens_k, 2, 0)
            self.forward_decode_metadata = metadata
"""


@pytest.mark.parametrize(
    ("localized", "flagged"),
    [
        ("mode.is_target_verify()", True),
        # the same questions as the outer test, in another order: no path takes one and not the other
        ("mode.is_target_verify() or mode.is_decode_or_idle()", False),
    ],
    ids=["verify only", "every mode planned"],
)
def test_the_lengths_a_metadata_field_is_left_holding_are_what_the_launch_gets(localized: str, flagged: bool) -> None:
    """Blind sets 1, 8 and 9: `metadata.seq_lens_k`, which SGLang's MLA decode launches with under DCP, left with
    the whole lengths on the decode path (SGLang 0.5.23's own `init_forward_metadata` is the clean shape)."""
    found = check_source(textwrap.dedent(KEPT_LENGTHS).replace("LOCALIZED", localized))
    assert [(f.code, f.symbol) for f in found] == (
        [("SG203", "ForkBackend.init_forward_metadata")] if flagged else []
    ), found
    if flagged:
        assert "leaves the whole sequence's lengths" in found[0].message and ".seq_lens_k" in found[0].message


COPIED = """
from sglang.srt.layers.dcp.layout import get_dcp_lens
from sglang.srt.runtime_context import get_parallel

class DecodeMetadata:
    seq_lens_k = None

class ForkBackend:
    def replay_decode(self, metadata: DecodeMetadata, forward_batch):
        if get_parallel().dcp_enabled:
            metadata.seq_lens_k.copy_(LENS)
"""


@pytest.mark.parametrize(
    ("lens", "flagged"),
    [("forward_batch.seq_lens", True), ("get_dcp_lens(forward_batch.seq_lens, 2, 0)", False)],
    ids=["whole", "share"],
)
def test_lengths_copied_into_the_field_in_place_are_what_it_holds(lens: str, flagged: bool) -> None:
    """`metadata.seq_lens_k.copy_(lens)`: the CUDA-graph replay's in-place form."""
    codes = [f.code for f in check_source(textwrap.dedent(COPIED).replace("LENS", lens))]
    assert codes == (["SG203"] if flagged else []), codes


SET_14_WORKERS = {
    # the model runner's own padding step, before the plan: the eager runner then runs the batch it was planned for
    "padded_by_the_runner_then_planned": (
        """
        class DraftWorker:
            def draft(self, forward_batch: ForwardBatch):
                self.model_runner._prepare_eager_forward_batch(forward_batch)
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return self.model_runner.eager_runner.execute(forward_batch)
        """,
        False,
    ),
    # ... and after it
    "planned_then_padded_by_the_runner": (
        """
        class DraftWorker:
            def draft(self, forward_batch: ForwardBatch):
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                self.model_runner._prepare_eager_forward_batch(forward_batch)
                return self.model_runner.model.forward(forward_batch.input_ids, None, forward_batch)
        """,
        True,
    ),
    # a batch a field declares, filled by another method and planned by a property: the one the forward runs
    "a_declared_batch_planned_by_a_property": (
        """
        from typing import Optional

        class DraftWorker:
            _staged: Optional[ForwardBatch] = None

            def stage(self, forward_batch):
                self._staged = forward_batch

            @property
            def planned(self):
                forward_batch = self._staged
                self.attn_backend.init_forward_metadata(forward_batch)
                forward_batch.mark_forward_metadata_ready()
                return forward_batch

            def run(self):
                return self.draft_runner.forward(self.planned)
        """,
        True,
    ),
    # a dataclass whose `__post_init__` plans and marks the batch it holds
    "a_dataclass_that_plans_after_init": (
        """
        import dataclasses

        @dataclasses.dataclass
        class PlannedStep:
            forward_batch: ForwardBatch
            backend: object
            replan_equivalent: bool = False

            def __post_init__(self):
                self.backend.init_forward_metadata(self.forward_batch)
                self.forward_batch.mark_forward_metadata_ready(replan_equivalent=self.replan_equivalent)

        class DraftWorker:
            def draft(self, forward_batch: ForwardBatch):
                step = PlannedStep(forward_batch, self.attn_backend)
                return self.draft_runner.forward(step.forward_batch)

            def draft_replannable(self, forward_batch: ForwardBatch):
                step = PlannedStep(forward_batch, self.attn_backend, replan_equivalent=True)
                return self.draft_runner.forward(step.forward_batch)
        """,
        True,
    ),
}


@pytest.mark.parametrize("name", list(SET_14_WORKERS))
def test_a_set_14_worker_is_judged_as_it_runs(name: str) -> None:
    """Blind set 14's `seed_forward_prepadded`, `run_staged_draft` and `draft_planned_step_record` shapes."""
    text, flagged = SET_14_WORKERS[name]
    findings, _ = check_source_judged(BATCH + textwrap.dedent(text), "worker.py", "worker")
    scopes = [f.symbol for f in findings if f.code == "SG106"]
    assert bool(scopes) is flagged, (scopes, [f.message for f in findings])
    assert "DraftWorker.draft_replannable" not in scopes
