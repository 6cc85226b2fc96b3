"""Every rule on the evaluator shows evaluated guards in its good example: each guard below is what keeps the good
example clean, and changing what it computes (not how it is spelled) makes the rule fire. A rule that recognised
spellings would stay quiet on some of these; one that evaluates cannot."""

from __future__ import annotations

import textwrap

import pytest

from specguard.composition import check_source
from specguard.rules import EVALUATED, load_rule

# (rule, what the good example computes, the same guard computing something else)
MUTATIONS = [
    # SG103: the helper that decides, a local bool, an early return over two modes, a match, an assert
    ("SG103", "if batch_desc.cg_mode == CUDAGraphMode.FULL:", "if batch_desc.cg_mode != CUDAGraphMode.NONE:"),
    ("SG103", "full = batch_desc.cg_mode is CUDAGraphMode.FULL", "full = batch_desc.cg_mode is not CUDAGraphMode.NONE"),
    ("SG103", "in (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE):", "in (CUDAGraphMode.NONE,):"),
    ("SG103", "case CUDAGraphMode.FULL:", "case CUDAGraphMode.FULL | CUDAGraphMode.PIECEWISE:"),
    ("SG103", 'assert batch_desc.cg_mode == CUDAGraphMode.FULL, "', 'assert batch_desc.cg_mode or True, "'),
    # SG201: an assert on a set, a raise in a loop, a check in a module helper
    ("SG201", "assert len(flags) == 1,", "assert len(flags) >= 1,"),
    ("SG201", "if spec.non_causal_multi_token_decode != first:", "if spec.non_causal_multi_token_decode is None:"),
    ("SG201", "if len(values) != 1:", "if len(values) > 2:"),
    # SG105: the recompute into the buffer handed on, before the build
    ("SG105", "prepare_dcp_local_seq_lens(\n", "print(\n"),
    (
        "SG105",
        "self.input_buffers.dcp_local_seq_lens, self.input_buffers.seq_lens,",
        "self.x, self.input_buffers.seq_lens,",
    ),
    # SG202: the bound repeated by the rows' count, not by another one, and expanded at all
    ("SG202", "dcp_tot_seq_lens.repeat_interleave(query_len)", "dcp_tot_seq_lens.repeat_interleave(2)"),
    ("SG202", "dcp_tot_seq_lens.repeat_interleave(query_len)", "dcp_tot_seq_lens"),
    # SG101: the capture keyword, evaluated through a local and a partial
    ("SG101", "capturing = True", "capturing = not True"),
    # SG106: the mark that lets a padded batch be planned again, and the predicate that reads it
    (
        "SG106",
        "mark_forward_metadata_ready(replan_equivalent=True)",
        "mark_forward_metadata_ready(replan_equivalent=0)",
    ),
    ("SG106", "self.batch_size != self.planned_batch_size", "self.batch_size > self.planned_batch_size + 1"),
    ("SG106", "    forward_batch.prepare_mlp_sync_batch(self.draft_runner)\n        self.draft", "    self.draft"),
    # SG203: this rank's share computed from the batch's lengths, and handed on rather than the whole
    ("SG203", "local = get_dcp_lens(forward_batch.seq_lens,", "local = max(forward_batch.seq_lens,"),
    ("SG203", "seq_lens=local.to(torch.int32)", "seq_lens=forward_batch.seq_lens_cpu[: len(local)]"),
]


def test_every_rule_on_the_evaluator_has_its_guards_here() -> None:
    assert {code for code, _, _ in MUTATIONS} == EVALUATED


@pytest.mark.parametrize(("code", "guard", "changed"), MUTATIONS)
def test_changing_what_a_guard_computes_makes_its_rule_fire(code: str, guard: str, changed: str) -> None:
    good = textwrap.dedent(load_rule(code).good)
    assert guard in good
    assert check_source(good) == []
    findings = check_source(good.replace(guard, changed))
    assert code in [f.code for f in findings], findings
