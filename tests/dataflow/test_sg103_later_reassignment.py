"""Issue #8, table 2: `n = batch_desc.num_tokens`, then `if batch_desc.cg_mode != CUDAGraphMode.FULL: n = real`."""

from __future__ import annotations


def test_reassignment_on_every_non_full_path_clears_the_use(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class ReassigningSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                n = batch_desc.num_tokens
                if batch_desc.cg_mode != CUDAGraphMode.FULL:
                    n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []


def test_order_matters_and_every_non_full_path_must_reassign(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class ReassigningSpeculator(DraftModelSpeculator):
            def too_late(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                n = batch_desc.num_tokens
                metadata = self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # late
                if batch_desc.cg_mode != CUDAGraphMode.FULL:
                    n = int(query_start_loc_np[-1])
                return metadata

            def one_path(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np, eager):
                n = batch_desc.num_tokens
                if eager:
                    n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # partial
        """
    )
    assert [f.line for f in checked.findings] == [checked.line("# late"), checked.line("# partial")]
