"""The project index: speculators through any number of levels and modules, sinks through any import form."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specguard.analysis.engine import check_paths

BASE = """
class BaseSpeculator:
    pass

class DraftModelSpeculator(BaseSpeculator):
    def _build_attn_metadata(self, num_reqs, batch_desc):
        pass
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def codes(root: Path, *paths: str) -> list[tuple[str, str, int]]:
    result = check_paths([root / p for p in paths] or [root], use_cache=False)
    assert result.errors == []
    return [(Path(f.path).name, f.code, f.line) for f in result.findings]


def pkg(extra: dict[str, str]) -> dict[str, str]:
    return {"fork/__init__.py": "", "fork/spec/__init__.py": "", "fork/spec/speculator.py": BASE, **extra}


def test_speculator_through_three_levels_and_modules(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/spec/mid.py": "from fork.spec.speculator import DraftModelSpeculator\n"
                "class MidSpeculator(DraftModelSpeculator):\n    pass\n",
                "fork/spec/upper.py": "from .mid import MidSpeculator\nclass Upper(MidSpeculator):\n    pass\n",
                "fork/leaf/__init__.py": "",
                "fork/leaf/leaf.py": """
            from fork.spec.upper import Upper
            from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

            class Leaf(Upper):
                def propose(self):
                    return build_attn_metadata()
        """,
            }
        ),
    )
    assert codes(tree) == [("leaf.py", "SG101", 7)]


def test_only_the_leaf_folder_checked_still_sees_its_ancestors(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/spec/mid.py": "from fork.spec.speculator import DraftModelSpeculator\n"
                "class MidSpeculator(DraftModelSpeculator):\n    pass\n",
                "fork/leaf/__init__.py": "",
                "fork/leaf/leaf.py": """
            from ..spec import mid
            from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

            class Leaf(mid.MidSpeculator):
                def propose(self):
                    return build_attn_metadata()
        """,
            }
        ),
    )
    assert codes(tree, "fork/leaf") == [("leaf.py", "SG101", 7)]


def test_base_aliases_and_module_attributes(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/a.py": """
            import fork.spec.speculator as base
            from fork.spec.speculator import DraftModelSpeculator as DMS
            from vllm.v1.worker.gpu import attn_utils
            from vllm.v1.worker.gpu.attn_utils import build_attn_metadata as bam

            class ViaModule(base.DraftModelSpeculator):
                def propose(self):
                    return attn_utils.build_attn_metadata()

            class ViaAlias(DMS):
                def propose(self):
                    return bam()
        """,
            }
        ),
    )
    assert codes(tree, "fork/a.py") == [("a.py", "SG101", 9), ("a.py", "SG101", 13)]


def test_re_exported_base_is_followed(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/spec/__init__.py": "from fork.spec.speculator import DraftModelSpeculator\n",
                "fork/b.py": """
            from fork.spec import DraftModelSpeculator
            from fork.cp import prepare_dcp_local_seq_lens

            class S(DraftModelSpeculator):
                def propose(self):
                    prepare_dcp_local_seq_lens()
        """,
            }
        ),
    )
    assert codes(tree, "fork/b.py") == [("b.py", "SG104", 7)]


def test_a_non_speculator_may_define_helper_names_and_call_the_sink(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/model_state.py": """
            from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

            class ModelState:
                def _build_draft_attn_metadata(self):
                    return build_attn_metadata(num_tokens=self.batch_desc.num_tokens)
        """,
            }
        ),
    )
    assert codes(tree) == []


def test_a_method_of_another_object_named_like_the_sink_is_not_the_sink(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/c.py": """
            from fork.spec.speculator import DraftModelSpeculator

            class S(DraftModelSpeculator):
                def propose(self):
                    return self.builder.build_attn_metadata()
        """,
            }
        ),
    )
    # `self.builder.build_attn_metadata` is a method of some object, not the module-level sink
    assert codes(tree) == []


def test_capture_time_builder_is_exempt(tmp_path: Path) -> None:
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/d.py": """
            from fork.spec.speculator import DraftModelSpeculator
            from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
            from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens

            def _prepare_inputs_to_capture(num_reqs):
                prepare_dcp_local_seq_lens()
                return build_attn_metadata(num_reqs=num_reqs, for_cudagraph_capture=True)

            class S(DraftModelSpeculator):
                pass
        """,
            }
        ),
    )
    assert codes(tree) == []
