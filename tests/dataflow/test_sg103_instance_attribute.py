"""Issue #8, table 1: the padded count stored on `self` in one method and passed to the helper in another."""

from __future__ import annotations


def test_attribute_written_in_one_method_and_read_in_another_is_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AttributeSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor):
                self.padded_tokens = batch_desc.num_tokens

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self.padded_tokens)  # flagged
        """
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    written = checked.line("self.padded_tokens =")
    expected = f"through `self.padded_tokens`, set in `AttributeSpeculator.prepare` (line {written})"
    assert finding.message.endswith(
        f"{expected}; no fix offered: the padded count is read in another function, so the "
        "descriptor that decides is not in scope"
    )


def test_attribute_written_in_a_base_class_through_a_helper(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec.base import DispatchingSpeculator

        class AttributeSpeculator(DispatchingSpeculator):
            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)  # flagged
        """,
        base="""
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class DispatchingSpeculator(DraftModelSpeculator):
            def dispatch(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                self.tokens = self._count(batch_desc)

            def _count(self, desc):
                return desc.num_tokens
        """,
    )
    (finding,) = checked.at("# flagged")
    assert "`self.tokens`, set in `DispatchingSpeculator.dispatch`" in finding.message


def test_attribute_set_only_under_full_mode_is_not_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AttributeSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    self.tokens = batch_desc.num_tokens
                else:
                    self.tokens = int(query_start_loc_np[-1])

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)
        """
    )
    assert checked.findings == []


def test_reassigned_locally_before_the_use(check_speculator) -> None:  # type: ignore[no-untyped-def]
    """Within one method the value at the use is what counts, for `self.x` too."""
    checked = check_speculator(
        """
        class AttributeSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor):
                self.tokens = batch_desc.num_tokens

            def propose(self, num_reqs, query_start_loc_np):
                self.tokens = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)
        """
    )
    assert checked.findings == []
