"""Issue #8, table 1: the padded count stored on `self` in one method and passed to the helper in another."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.composition import check_paths
from specguard.settings import Settings


def test_attribute_written_in_one_method_and_read_in_another_is_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AttributeSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor):
                self.padded_tokens = batch_desc.num_tokens

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs, num_tokens_padded=self.padded_tokens)  # flagged
        """
    )
    (finding,) = checked.findings
    assert finding.code == "SG103" and finding.line == checked.line("# flagged")
    written = checked.line("self.padded_tokens =")
    expected = f"through `self.padded_tokens`, set in `AttributeSpeculator.prepare` (line {written})"
    assert finding.message.endswith(
        f"{expected}; no fix offered: the padded count is read in another function, so the "
        "descriptor that decides is not in scope"
    )


def test_attribute_written_in_a_base_class_through_a_helper(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec.base import DispatchingSpeculator

        class AttributeSpeculator(DispatchingSpeculator):
            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)  # flagged
        """,
        base="""
        from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
        from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

        class DispatchingSpeculator(DraftModelSpeculator):
            def dispatch(self, num_reqs, num_tokens):
                batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                self.tokens = self._count(batch_desc)

            def _count(self, desc):
                return desc.num_tokens
        """,
    )
    (finding,) = checked.at("# flagged")
    assert "`self.tokens`, set in `DispatchingSpeculator.dispatch`" in finding.message


def test_attribute_set_only_under_full_mode_is_not_flagged(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        class AttributeSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor, query_start_loc_np):
                if batch_desc.cg_mode == CUDAGraphMode.FULL:
                    self.tokens = batch_desc.num_tokens
                else:
                    self.tokens = int(query_start_loc_np[-1])

            def propose(self, num_reqs):
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)
        """
    )
    assert checked.findings == []


def test_reassigned_locally_before_the_use(check_speculator) -> None:  # type: ignore[no-untyped-def]
    """Within one method the value at the use is what counts, for `self.x` too."""
    checked = check_speculator(
        """
        class AttributeSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor):
                self.tokens = batch_desc.num_tokens

            def propose(self, num_reqs, query_start_loc_np):
                self.tokens = int(query_start_loc_np[-1])
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)
        """
    )
    assert checked.findings == []


# Issue #20: a writer of instance attributes evaluates what it assigns only when the attribute is read.


def test_attributes_a_writer_sets_through_calls_and_tuples_still_carry_the_padded_count(check_speculator) -> None:  # type: ignore[no-untyped-def]
    checked = check_speculator(
        """
        from myspec import counts

        class TupleSpeculator(DraftModelSpeculator):
            def prepare(self, batch_desc: BatchExecutionDescriptor, num_reqs):
                pair = counts.both(batch_desc, num_reqs)
                self.real_reqs, self.tokens = pair
                self.first, _ = counts.both(batch_desc, num_reqs)

            def propose(self, num_reqs):
                self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.real_reqs)
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens)  # flagged
        """,
        counts="""
        def both(desc, num_reqs):
            return num_reqs, desc.num_tokens
        """,
    )
    (finding,) = checked.findings
    assert finding.line == checked.line("# flagged")
    assert "`self.tokens`, set in `TupleSpeculator.prepare`" in finding.message


WRITER = """\
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from myspec import counts, heavy


class LazySpeculator(DraftModelSpeculator):
    def __init__(self, cfg, batch_desc: BatchExecutionDescriptor):
        self.tables = heavy.build_tables(cfg)
        names = [name for name in heavy.layer_names(cfg)]
        self.layer_names = set(names)
        self.tokens = counts.padded(batch_desc)

    def propose(self, num_reqs):
        {guard}
        return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=self.tokens, tables=self.tables)
"""


@pytest.mark.parametrize("reads_tables", [False, True])
def test_a_writer_reads_only_the_modules_the_attributes_read_need(tmp_path: Path, vllm_source, reads_tables) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "project"
    (root / "myspec").mkdir(parents=True)
    (root / "vllm").symlink_to(vllm_source("0.28.0"))
    (root / "myspec" / "__init__.py").write_text("")
    drafter = root / "myspec" / "drafter.py"
    # a build reads only its count: the tables it is handed are computed only where a test reads them
    drafter.write_text(WRITER.format(guard="if not self.tables:\n            return None" if reads_tables else "pass"))
    (root / "myspec" / "counts.py").write_text("def padded(desc):\n    return desc.num_tokens\n")
    (root / "myspec" / "heavy.py").write_text(
        "def build_tables(cfg):\n    return [cfg]\n\n\ndef layer_names(cfg):\n    return []\n"
    )
    # SG103 alone: the rules that follow modules imported whole (SG101, SG104, SG202) read heavy.py to preselect
    result = check_paths([root / "myspec"], Settings(select=["SG103"]), use_cache=False)
    assert [f.code for f in result.findings] == ["SG103"]
    assert result.project is not None
    read = {Path(path).name for path, *_ in result.project.cache.judgements[str(drafter)].deps}
    assert "counts.py" in read
    assert ("heavy.py" in read) is reads_tables


def test_a_list_a_loop_of_unknown_length_appends_to_has_an_unknown_length(check_speculator) -> None:  # type: ignore[no-untyped-def]
    """vLLM 0.24.0's DFlash: `self.attn_groups, _, _ = init_attn_backend(...)` builds its groups in loops over the
    KV-cache config, and `set_attn` asserts exactly one of them has layers. The loops run an unknown number of times:
    the list may have any length (not the evaluator's three rounds), so the assert may hold."""
    checked = check_speculator(
        """
        def init_groups(cfg):
            groups = []
            for group in cfg.kv_cache_groups:
                names = []
                for name in group.layer_names:
                    names.append(name)
                groups.append(names)
            return groups, None, None

        class GroupSpeculator(DraftModelSpeculator):
            def __init__(self):
                self.group_id = -1

            def set_attn(self, cfg):
                self.attn_groups, _, _ = init_groups(cfg)
                drafts = [gid for gid, g in enumerate(self.attn_groups) if g]
                assert len(drafts) == 1
                self.group_id = drafts[0]

            def propose(self, num_reqs, batch_desc: BatchExecutionDescriptor):
                assert self.group_id >= 0
                n = batch_desc.num_tokens
                return self._build_draft_attn_metadata(num_reqs=num_reqs, num_tokens_padded=n)  # flagged
        """
    )
    assert [f.line for f in checked.findings] == [checked.line("# flagged")]
