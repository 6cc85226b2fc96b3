"""SG102 and an override that only observes the shared helper (a blind set's false positive, issue 28): the base
helper still builds from exactly the caller's arguments and the caller gets exactly its result, so nothing the
metadata is built from changes. An override that changes either, or a pure forward (dead code, deleted by the
fix), is still flagged."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

HEAD = """
import contextlib
import functools

import torch

class DraftModelSpeculator:
    def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, causal=True):
        ...
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
    # the second blind set's false positives: an assertion refuses loudly, a `with` only wraps the call
    "asserts on its arguments": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                assert num_reqs <= self.max_num_reqs, "too many requests for the draft buffers"
                return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    "returns the call inside a profiler range": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, *args, **kwargs):
                with torch.cuda.nvtx.range(f"draft metadata {num_reqs}"):
                    return super()._build_attn_metadata(num_reqs, *args, **kwargs)
    """,
    "a default the base gives too": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, causal=True):
                assert batch_desc is not None
                return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np, causal=causal)
    """,
    "clears a flag in a finally": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, *args, **kwargs):
                self._building = True
                try:
                    return super()._build_attn_metadata(*args, **kwargs)
                finally:
                    self._building = False
    """,
    # the fourth blind set's false positive: the arguments gathered in a dict and spread into the call
    # blind set 8: a decorator the pack names as leaving the result as it is
    "under @torch.inference_mode(), in a profiler range": """
        class Drafter(DraftModelSpeculator):
            @torch.inference_mode()
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                with torch.profiler.record_function("draft metadata"):
                    return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    "passes its arguments through a dict": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, causal=True):
                call_kwargs = dict(num_reqs=num_reqs, batch_desc=batch_desc, causal=causal)
                assert num_reqs <= self.max_num_reqs
                return super()._build_attn_metadata(query_start_loc_np=query_start_loc_np, **call_kwargs)
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
    "a default the base does not give": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, causal=False):
                assert batch_desc is not None
                return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np, causal=causal)
    """,
    "falls off the end on one path": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                if num_reqs:
                    return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    # blind set 8: `contextlib.suppress` swallows the base's refusal, and the override falls off its end (None)
    "returns the call inside contextlib.suppress": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                with contextlib.suppress(AssertionError):
                    return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    "under a decorator the pack does not name": """
        class Drafter(DraftModelSpeculator):
            @functools.lru_cache
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                with torch.profiler.record_function("draft metadata"):
                    return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
    "changes an argument in place": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, **kwargs):
                kwargs["causal"] = False
                return super()._build_attn_metadata(num_reqs, **kwargs)
    """,
    "a forward with the base's defaults and nothing else": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np, causal=True):
                return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np, causal=causal)
    """,
    "changes the dict its arguments are spread from": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                call_kwargs = {"num_reqs": num_reqs, "batch_desc": batch_desc}
                call_kwargs["batch_desc"] = self.pinned_desc
                return super()._build_attn_metadata(query_start_loc_np=query_start_loc_np, **call_kwargs)
    """,
    "spreads a dict that drops an argument": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                call_kwargs = dict(num_reqs=num_reqs, query_start_loc_np=query_start_loc_np)
                assert batch_desc is not None
                return super()._build_attn_metadata(**call_kwargs)
    """,
    "raises for a caller to catch": """
        class Drafter(DraftModelSpeculator):
            def _build_attn_metadata(self, num_reqs, batch_desc, query_start_loc_np):
                if num_reqs > self.max_num_reqs:
                    raise ValueError("too many requests")
                return super()._build_attn_metadata(num_reqs, batch_desc, query_start_loc_np)
    """,
}


@pytest.mark.parametrize("source", OBSERVES.values(), ids=list(OBSERVES))
def test_an_override_that_only_observes_the_helper_is_not_flagged(source: str) -> None:
    assert [f for f in check_source(HEAD + textwrap.dedent(source)) if f.code == "SG102"] == []


@pytest.mark.parametrize("source", CHANGES.values(), ids=list(CHANGES))
def test_an_override_that_changes_what_is_built_or_returned_is(source: str) -> None:
    assert [f.code for f in check_source(HEAD + textwrap.dedent(source))] == ["SG102"]
