"""Issue #8, acceptance: the padded count used only to slice a buffer is not flagged."""

from __future__ import annotations


def test_slicing_buffers_with_the_padded_count(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class SlicingSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                num_tokens_padded = batch_desc.num_tokens
                slot_mappings = self.block_tables.slot_mappings[:, :num_tokens_padded]
                input_ids = self.input_buffers.input_ids[:num_tokens_padded]
                self._run_model(num_tokens_padded, input_ids, slot_mappings)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs, num_tokens_padded=int(query_start_loc_np[-1]), slot_mappings=slot_mappings,
                )
        """
    )
    assert checked.findings == []
