"""SG102 and an override that only observes the shared helper (a blind set's false positive, issue 28): the base
helper still builds from exactly the caller's arguments and the caller gets exactly its result, so nothing the
metadata is built from changes. An override that changes either, or a pure forward (dead code, deleted by the
fix), is still flagged."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

HEAD = """
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
"""

OBSERVES = {
    "records what was built": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, *args, **kwargs):
                attn_metadata = super()._build_attn_metadata(*args, **kwargs)
                if attn_metadata is not None:
                    self._last_layers = sorted(attn_metadata)
                return attn_metadata
    """,
    "logs, then returns the call": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                logger.debug("draft build for %d requests", num_reqs)
                return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
}

CHANGES = {
    "a pure forward": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, *args, **kwargs):
                return super()._build_attn_metadata(*args, **kwargs)
    """,
    "hands the base another descriptor": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                batch_desc = self.pinned_desc
                metadata = super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
                return metadata
    """,
    "returns something else on one path": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, *args, **kwargs):
                metadata = super()._build_attn_metadata(*args, **kwargs)
                if self.cached is not None:
                    return self.cached
                return metadata
    """,
    "drops an argument": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, dcp_local_seq_lens=None):
                metadata = super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
                return metadata
    """,
}


@pytest.mark.parametrize("source", OBSERVES.values(), ids=list(OBSERVES))
def test_an_override_that_only_observes_the_helper_is_not_flagged(source: str) -> None:
    assert [f for f in check_source(HEAD + textwrap.dedent(source)) if f.code == "SG102"] == []


@pytest.mark.parametrize("source", CHANGES.values(), ids=list(CHANGES))
def test_an_override_that_changes_what_is_built_or_returned_is(source: str) -> None:
    assert [f.code for f in check_source(HEAD + textwrap.dedent(source))] == ["SG102"]
