"""Issue #8, table 1: the padded count put in a dict that is unpacked into the helper with `**`."""

from __future__ import annotations


def test_dict_call_unpacked_into_the_helper_is_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class KwargsSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, seq_lens):
                kw = dict(num_reqs=num_reqs, num_reqs_padded=num_reqs, num_tokens_padded=batch_desc.num_tokens)
                return self._build_draft_attn_metadata(**kw, seq_lens_cpu_upper_bound=seq_lens, step=1)  # flagged
        """
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    assert "`num_tokens_padded` (unpacked with `**`)" in finding.message
    assert finding.message.endswith(
        f"through `kw` (line {checked.line('kw = dict')}); no fix offered: the count reaches the call inside `**` "
        "arguments, with nothing to rewrite in place"
    )


def test_dict_literal_item_store_and_update_are_followed(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class KwargsSpeculator(DraftModelSpeculator):
            def literal(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                kw = {"num_reqs": num_reqs, "num_tokens_padded": batch_desc.num_tokens}
                return self._build_draft_attn_metadata(**kw)  # literal

            def store(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                kw = {"num_reqs": num_reqs}
                kw["num_tokens_padded"] = batch_desc.num_tokens
                return self._build_draft_attn_metadata(**kw)  # store

            def update(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                kw = {}
                kw.update(num_reqs=num_reqs, num_tokens_padded=batch_desc.num_tokens)
                return self._build_draft_attn_metadata(**kw)  # update
        """
    )
    assert {f.line for f in checked.findings} == {checked.line(m) for m in ("# literal", "# store", "# update")}
    assert set(checked.codes) == {"SG103"}


def test_a_dict_holding_the_padded_count_under_another_key_is_not_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class KwargsSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                kw = dict(num_reqs=num_reqs, num_tokens_padded=int(query_start_loc_np[-1]))
                kw["slots"] = self.slot_mappings[: batch_desc.num_tokens]
                kw["padded_for_logging"] = batch_desc.num_tokens
                return self._build_draft_attn_metadata(**kw)
        """
    )
    assert checked.findings == []
