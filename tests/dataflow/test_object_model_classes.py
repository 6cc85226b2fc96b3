"""Issue 28, blind set 4: a mode that is a setting of the process is not the batch's, and an object held on
`self` may have been written by its own methods since it was built."""

from __future__ import annotations

import textwrap

import pytest


def test_a_managers_configured_mode_does_not_guard_the_batch(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from vllm.config.compilation import CUDAGraphMode

        class Manager:
            def __init__(self, cudagraph_mode: CUDAGraphMode):
                self.cudagraph_mode = cudagraph_mode

        class ManagerModeSpeculator(DraftModelSpeculator):
            def init_cudagraph_manager(self, cudagraph_mode: CUDAGraphMode):
                self.manager = Manager(cudagraph_mode)

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                graphs = self.manager.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
                tokens = batch_desc.num_tokens if graphs else num_reqs
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=tokens)  # flagged

            def propose_by_batch(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                full = batch_desc.cg_mode == CUDAGraphMode.FULL
                tokens = batch_desc.num_tokens if full else num_reqs
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=tokens)
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", checked.line("# flagged"))]
    assert not checked.undecided


def test_a_held_objects_field_written_by_its_own_method(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class GraphState:
            def __init__(self):
                self.tokens = 0
                self.real = 0

            def record(self, desc: BatchExecutionDescriptor, num_reqs):
                self.tokens = desc.num_tokens
                self.real = num_reqs

        class HolderSpeculator(DraftModelSpeculator):
            def __init__(self):
                self.state = GraphState()

            def dispatch(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                self.state.record(batch_desc, num_reqs)

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self.state.tokens)  # flagged

            def propose_real(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self.state.real)
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", checked.line("# flagged"))]


def test_a_bool_operand_decides_an_and_with_a_false_one(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from vllm.config.compilation import CUDAGraphMode

        class SyncSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, sync):
                full = batch_desc.cg_mode == CUDAGraphMode.FULL
                tokens = batch_desc.num_tokens if sync is not None and full else num_reqs
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=tokens)
        """
    )
    assert not checked.findings and not checked.undecided


def test_a_holder_from_another_module_whose_method_prepares(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec.dcp import Preparer

        class HolderSpeculator(DraftModelSpeculator):
            def set_attn(self, buffers):
                self._preparer = Preparer(buffers)

            def propose(self, num_reqs):
                self._preparer.refresh(num_reqs)  # flagged
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=num_reqs)
        """,
        dcp="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

        class Preparer:
            def __init__(self, buffers):
                self.buffers = buffers

            def refresh(self, num_reqs):
                return prepare_dcp_local_seq_lens(self.buffers.dcp_local_seq_lens, self.buffers.seq_lens, num_reqs)
        """,
    )
    assert [(f.code, f.line) for f in checked.findings if f.path.endswith("drafter.py")] == [
        ("SG104", checked.line("# flagged"))
    ]


def test_a_model_state_handed_its_batchs_mode_is_judged_against_it(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class PaddedModelState:
            def prepare_attn(self, input_batch, cudagraph_mode: CUDAGraphMode):
                return build_attn_metadata(num_tokens=input_batch.num_tokens_after_padding)  # by its mode

            def prepare_attn_guarded(self, input_batch, cudagraph_mode: CUDAGraphMode):
                if cudagraph_mode == CUDAGraphMode.FULL:
                    num_tokens = input_batch.num_tokens_after_padding
                else:
                    num_tokens = input_batch.num_tokens
                return build_attn_metadata(num_tokens=num_tokens)

            def rebuild(self, input_batch):  # no mode in scope: not decided (its callers say), listed with -v
                return build_attn_metadata(num_tokens=input_batch.num_tokens_after_padding)

            def rebuild_for(self, input_batch, batch_desc: BatchExecutionDescriptor):
                return build_attn_metadata(num_tokens=batch_desc.num_tokens)  # by its descriptor
        """
    )
    flagged = [checked.line("# by its mode"), checked.line("# by its descriptor")]
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", line) for line in flagged]


def test_a_capture_method_prepares_its_dummy_batchs_lengths(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec.graphs import GraphManager

        class CapturingSpeculator(DraftModelSpeculator):
            def init_cudagraph_manager(self, buffers):
                self.manager = GraphManager(buffers)

            def capture(self):
                self.manager.capture(4)

            def warm(self):
                self.manager.capture(4)  # flagged
        """,
        graphs="""
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

        class GraphManager:
            def __init__(self, buffers):
                self.buffers = buffers

            def capture(self, num_reqs):
                return prepare_dcp_local_seq_lens(self.buffers.dcp_local_seq_lens, self.buffers.seq_lens, num_reqs)
        """,
    )
    assert [(f.code, f.line) for f in checked.findings if f.path.endswith("drafter.py")] == [
        ("SG104", checked.line("# flagged"))
    ]


STORED_PARTIALS = {
    "over a class-level default": """
        class RefreshingSpeculator(DraftModelSpeculator):
            _refresh = None

            def set_attn(self, buffers):
                self._refresh = functools.partial(prepare_dcp_local_seq_lens, buffers)
    """,
    # the other path of set_attn leaves the attribute as __init__ set it
    "on one path of a setup method": """
        class RefreshingSpeculator(DraftModelSpeculator):
            def __init__(self):
                self._refresh = None

            def set_attn(self, buffers):
                if self.dcp_size > 1:
                    self._refresh = functools.partial(prepare_dcp_local_seq_lens, buffers)
    """,
}


@pytest.mark.parametrize("setup", STORED_PARTIALS.values(), ids=list(STORED_PARTIALS))
def test_a_partial_another_method_stored_is_called(check_speculator, setup: str) -> None:  # type: ignore[no-untyped-def]
    head = "import functools\n\nfrom vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens\n"
    checked = check_speculator(
        head
        + textwrap.dedent(setup)
        + textwrap.indent(
            textwrap.dedent("""
                def propose(self, num_reqs):
                    if self._refresh is not None:
                        self._refresh(num_reqs)  # flagged
                    return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=num_reqs)
            """),
            "    ",
        )
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG104", checked.line("# flagged"))]
