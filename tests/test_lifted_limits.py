"""The limits the rules documented before they judged on the evaluator (issue #21's `limits`), each with the code it
said the rule missed: the evaluator lifted them, so that code is now flagged, as the rule flags it today. A limit
that still holds is in the rule's `limits` (tests/test_rule_examples.py checks its example is not flagged)."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source

LIFTED = [
    (  # "a call through a local variable ... is not followed"
        "SG101",
        """
        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs):
                build = build_attn_metadata
                return build(attn_groups=self.attn_groups, num_reqs=num_reqs)  # flagged
        """,
        "`MyDraftSpeculator.propose` calls `build_attn_metadata` directly",
    ),
    (  # "... or `getattr` is not followed"
        "SG101",
        """
        from vllm.v1.worker.gpu import attn_utils
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs):
                build = getattr(attn_utils, "build_attn_metadata")
                return build(attn_groups=self.attn_groups, num_reqs=num_reqs)  # flagged
        """,
        "`MyDraftSpeculator.propose` calls `build_attn_metadata` directly",
    ),
    (  # "Properties ... are not followed"
        "SG103",
        """
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            @property
            def padded(self):
                return self._desc.num_tokens

            def prepare(self, num_reqs, num_tokens):
                self._desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.padded)  # flagged
        """,
        "passes `self._desc.num_tokens` (line 8), a padded token count",
    ),
    (  # "`getattr` ... not followed"
        "SG103",
        """
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class MyDraftSpeculator(DraftModelSpeculator):
            def propose(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                n = getattr(batch_desc, "num_tokens")
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
        """,
        "a padded token count, as `num_tokens_padded=`",
    ),
    (  # "a preparation anywhere before the sink counts, whether or not its result reaches the sink"
        "SG105",
        """
        from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

        def build_attn_metadata(*, num_reqs, num_tokens, seq_lens, dcp_local_seq_lens=None):
            ...

        class DraftModelSpeculator:
            def _build_attn_metadata(self, num_reqs, num_tokens):
                prepare_dcp_local_seq_lens(self.other_lens, self.input_buffers.seq_lens, num_reqs)
                return build_attn_metadata(  # flagged
                    num_reqs=num_reqs, num_tokens=num_tokens, seq_lens=self.input_buffers.seq_lens,
                )
        """,
        "without recomputing DCP rank-local sequence lengths",
    ),
    (  # "A flag handed to the constructor by position is not followed"
        "SG201",
        """
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def merge(cls, specs):  # flagged: the merged spec's flag has no keyword to point at
                return cls(any(s.non_causal_multi_token_decode for s in specs))
        """,
        "merges a KV-cache group whose layers disagree on `non_causal_multi_token_decode`",
    ),
    (  # "A reduction made in another method that the merge calls is not followed"
        "SG201",
        """
        from dataclasses import dataclass

        @dataclass
        class MLAAttentionSpec:
            non_causal_multi_token_decode: bool = False

            @classmethod
            def _merged_flag(cls, specs):
                return any(s.non_causal_multi_token_decode for s in specs)

            @classmethod
            def merge(cls, specs):
                return cls(non_causal_multi_token_decode=cls._merged_flag(specs))  # flagged
        """,
        "merged with `any()`",
    ),
]


@pytest.mark.parametrize(("code", "source", "says"), LIFTED, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(LIFTED)])
def test_a_lifted_limit_is_flagged_where_it_was_missed(code: str, source: str, says: str) -> None:
    text = textwrap.dedent(source)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "# flagged" in row)
    (finding,) = check_source(text)
    assert (finding.code, finding.line) == (code, line) and says in finding.message, finding
