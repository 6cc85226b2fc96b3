"""Issue #8, acceptance: a module-level function returning the padded count, in the module or imported."""

from __future__ import annotations


def test_module_level_function_of_the_same_module(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        def padded_tokens(batch_desc):
            return batch_desc.num_tokens

        class FunctionSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                n = padded_tokens(batch_desc)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
        """
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    assert "returned by `padded_tokens`" in finding.message


def test_function_imported_from_another_module_of_the_project(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec import counts
        from myspec.counts import padded_tokens as padded

        class FunctionSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=padded(batch_desc))  # alias

            def propose_module(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                n = counts.rounded(counts.padded_tokens(batch_desc))
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # module
        """,
        counts="""
        def padded_tokens(desc):
            return desc.num_tokens

        def rounded(n, multiple=8):
            return (n + multiple - 1) // multiple * multiple
        """,
    )
    assert {f.line for f in checked.findings} == {checked.line("# alias"), checked.line("# module")}
    assert set(checked.codes) == {"SG103"}


def test_a_function_returning_the_real_count_is_not_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        def real_tokens(batch_desc, query_start_loc_np):
            return int(query_start_loc_np[-1])

        class FunctionSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                n = real_tokens(batch_desc, query_start_loc_np)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []
