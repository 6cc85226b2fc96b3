"""Blind set 5 (issue 28): a fork's port of the speculator base onto vLLM's abstract `BaseSpeculator` defines the
shared helpers itself. A speculator whose ancestors define none of the helpers is where they are defined, a base
whatever it is called: its helpers are not overrides (SG102), its sink calls are the helper's (SG101), and SG105
judges them as the shared helper. A subclass of a base that has them still overrides one, by any name."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specguard.analysis.engine import CheckResult
from specguard.composition import check_paths

PORT = """
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator, DraftModelSpeculator


class PortedBase(BaseSpeculator):
    def _build_attn_metadata(self, num_reqs, dcp_local_seq_lens=None):
        return build_attn_metadata(num_reqs=num_reqs, dcp_local_seq_lens=self.input_buffers.dcp_local_seq_lens)

    def _build_uniform_attn_metadata(self, num_reqs, dcp_local_seq_lens=None):
        return self._build_attn_metadata(num_reqs, dcp_local_seq_lens=dcp_local_seq_lens)


class PortedEagle(PortedBase):
    def _build_attn_metadata(self, num_reqs, dcp_local_seq_lens=None):
        return build_attn_metadata(num_reqs=num_reqs)


class LegacyDrafter(DraftModelSpeculator):
    def _build_draft_attn_metadata(self, num_reqs):
        return None
"""


def _check(root: Path, vllm: Path, text: str) -> tuple[Path, CheckResult]:
    """`text` as fork/port.py beside vLLM's real tree, checked as `specguard check fork`."""
    (root / "vllm").symlink_to(vllm)
    (root / "fork").mkdir()
    (root / "fork" / "__init__.py").write_text("")
    path = root / "fork" / "port.py"
    path.write_text(textwrap.dedent(text))
    return path, check_paths([root / "fork"], use_cache=False)


def test_a_port_of_the_base_is_a_base_and_its_subclasses_override(tmp_path: Path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    path, result = _check(tmp_path, vllm_source("0.33.0"), PORT)
    lines = path.read_text().splitlines()

    def where(finding) -> str:  # type: ignore[no-untyped-def]
        return next(line.split("(")[0].split()[-1] for line in reversed(lines[: finding.line]) if " def " in line)

    found = sorted((f.code, where(f)) for f in result.findings)
    assert ("SG105", "_build_attn_metadata") in found  # the port's helper hands the sink the instance's lengths
    assert ("SG102", "_build_attn_metadata") in found  # PortedEagle overrides the port's helper
    assert ("SG102", "_build_draft_attn_metadata") in found  # a legacy name below a base that has helpers
    assert [
        f for f in result.findings if f.code == "SG102" and f.line < lines.index("class PortedEagle(PortedBase):")
    ] == []


HANDS = """
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
from vllm.v1.worker.gpu.spec_decode.speculator import BaseSpeculator


class HandingBase(BaseSpeculator):
    def _build_attn_metadata(self, num_reqs, dcp_local_seq_lens=None):
        if dcp_local_seq_lens is None:
            dcp_local_seq_lens = prepare_dcp_local_seq_lens(self.buffers.dcp_local_seq_lens, self.buffers.seq_lens)
        return build_attn_metadata(num_reqs=num_reqs, dcp_local_seq_lens=dcp_local_seq_lens)

    def _build_uniform_attn_metadata(self, num_reqs, dcp_local_seq_lens=None):
        if dcp_local_seq_lens is None:
            dcp_local_seq_lens = self.buffers.dcp_local_seq_lens
        return self._build_attn_metadata(num_reqs, dcp_local_seq_lens=dcp_local_seq_lens)  # flagged
"""


def test_a_helper_handing_the_other_helper_the_instances_lengths(tmp_path: Path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    path, result = _check(tmp_path, vllm_source("0.33.0"), HANDS)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "# flagged" in text)
    assert [(f.code, f.line) for f in result.findings] == [("SG105", line)]
