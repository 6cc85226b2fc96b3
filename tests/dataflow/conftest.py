"""The dataflow tests check a small speculator package the way the issue's reproductions were run: beside the real
vLLM 0.28.0 tree (whose `DraftModelSpeculator._build_draft_attn_metadata` takes `num_tokens_padded`), checked as
`specguard check myspec`. Bases, helper signatures and the sink's signature come from the real vLLM sources."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specguard.composition import check_paths
from specguard.findings import Finding

HEADER = """\
from vllm.config.compilation import CUDAGraphMode
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator
"""


@dataclass
class Checked:
    findings: list[Finding]
    text: str  # the drafter module as written
    undecided: list = field(default_factory=list)  # (path, judgement) of the sites the check could not decide

    def line(self, marker: str) -> int:
        """The line of the drafter module holding `marker` (a comment such as `# flagged`)."""
        (number,) = [n for n, line in enumerate(self.text.splitlines(), 1) if marker in line]
        return number

    def at(self, marker: str) -> list[Finding]:
        return [f for f in self.findings if f.path.endswith("drafter.py") and f.line == self.line(marker)]

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]


@pytest.fixture
def check_speculator(tmp_path: Path, vllm_source) -> Callable[..., Checked]:  # type: ignore[no-untyped-def]
    """check(body, **other_modules): writes myspec/drafter.py (HEADER + body) and myspec/<name>.py, and checks
    myspec with the vLLM 0.28.0 package beside it (located, never imported)."""

    def check(body: str, **modules: str) -> Checked:
        root = tmp_path / "project"
        (root / "myspec").mkdir(parents=True, exist_ok=True)
        if not (root / "vllm").exists():
            (root / "vllm").symlink_to(vllm_source("0.28.0"))
        (root / "myspec" / "__init__.py").write_text("")
        text = HEADER + textwrap.dedent(body)
        (root / "myspec" / "drafter.py").write_text(text)
        for name, source in modules.items():
            (root / "myspec" / f"{name}.py").write_text(textwrap.dedent(source))
        result = check_paths([root / "myspec"], use_cache=False)
        assert result.errors == []
        return Checked(sorted(result.findings), text, result.undecided)

    return check
