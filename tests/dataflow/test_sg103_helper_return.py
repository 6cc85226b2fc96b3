"""Issue #8, table 1: the padded count returned by a helper method (`n = self._padded(batch_desc)`)."""

from __future__ import annotations


def test_helper_method_return_value_is_flagged_with_its_path(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class HelperMethodSpeculator(DraftModelSpeculator):
            def _padded(self, batch_desc):
                return batch_desc.num_tokens

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
                n = self._padded(batch_desc)
                return self._build_draft_attn_metadata(
                    num_reqs=num_reqs, num_reqs_padded=num_reqs, num_tokens_padded=n,  # flagged
                    seq_lens_cpu_upper_bound=seq_lens, step=1,
                )
        """
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    assert finding.symbol == "HelperMethodSpeculator.propose"
    expected = f"through `n` (line {checked.line('n = self._padded')}), returned by `HelperMethodSpeculator._padded`"
    why = "no fix offered: the padded count is read in another function, so the descriptor that decides is not in scope"
    assert finding.message.endswith(f"{expected}; {why}") and finding.fix is None


def test_helper_in_a_base_class_of_another_module_and_a_chain_of_helpers(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec.base import PaddingMixinSpeculator

        class ChainSpeculator(PaddingMixinSpeculator):
            def _count(self, desc):
                return self._round(self._padded(desc))

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self._count(batch_desc))  # flagged
        """,
        base="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class PaddingMixinSpeculator(DraftModelSpeculator):
            def _padded(self, desc):
                return desc.num_tokens

            def _round(self, n):
                return max(8, n)
        """,
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    assert "returned by `ChainSpeculator._count`" in finding.message


def test_a_helper_that_checks_the_mode_returns_a_safe_count(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class HelperMethodSpeculator(DraftModelSpeculator):
            def _num_tokens(self, batch_desc, query_start_loc_np):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    return batch_desc.num_tokens
                return int(query_start_loc_np[-1])

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                n = self._num_tokens(batch_desc, query_start_loc_np)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)
        """
    )
    assert checked.findings == []


def test_an_override_that_returns_the_real_count_wins_over_the_base(check_speculator) -> None:  # type: ignore[no-untyped-def]
    """`self._padded` dispatches to the subclass's own definition, as Python does."""
    checked = check_speculator(
        """
        from myspec.base import PaddingMixinSpeculator

        class OverridingSpeculator(PaddingMixinSpeculator):
            def _padded(self, desc):
                return self.real_tokens

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self._padded(batch_desc))

            def propose_base(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                n = super()._padded(batch_desc)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # super
        """,
        base="""
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class PaddingMixinSpeculator(DraftModelSpeculator):
            def _padded(self, desc):
                return desc.num_tokens
        """,
    )
    (finding,) = checked.findings
    assert finding.line == checked.line("# super") and "returned by `PaddingMixinSpeculator._padded`" in finding.message
