"""Issue #8, table 2: `cg_mode = batch_desc.cg_mode`, then `if cg_mode == CUDAGraphMode.FULL:` picks the count."""

from __future__ import annotations


def test_mode_read_into_a_local_then_tested(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class LocalModeSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                cg_mode = batch_desc.cg_mode
                if cg_mode == CUDAGraphMode.FULL:
                    n = batch_desc.num_tokens
                else:
                    n = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []


def test_a_local_holding_another_descriptors_mode_is_no_guard(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class LocalModeSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, prefill: BatchExecutionDescriptor):
                mode = prefill.cg_mode
                if mode == CUDAGraphMode.FULL:
                    return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=batch_desc.num_tokens)  # flagged
                return None
        """
    )
    assert [(f.code, f.line) for f in checked.findings] == [("SG103", checked.line("# flagged"))]
