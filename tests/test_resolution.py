"""The project index: speculators through any number of levels and modules, sinks through any import form."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from specguard.composition import check_paths

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


def test_speculators_under_try_if_nested_or_through_star_imports_are_checked(tmp_path: Path) -> None:
    """Issue 12 item 9: the same speculator code at module level with a named import was the only form found."""
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/spec/mid.py": "from fork.spec.speculator import *\n"
                "class MidSpeculator(DraftModelSpeculator):\n    pass\n",
                "fork/spec/reexport.py": "from fork.spec.mid import *\n",
                "fork/variants.py": """
            from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
            from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens
            from vllm.v1.worker.gpu.dp_utils import dispatch_cg_and_sync_dp
            from fork.spec.reexport import *

            try:
                class InTry(MidSpeculator):
                    def propose(self):
                        return build_attn_metadata()
            except ImportError:
                InTry = None

            if True:
                class InIf(MidSpeculator):
                    def _build_attn_metadata(self):
                        prepare_dcp_local_seq_lens()


            def factory():
                class InFunction(MidSpeculator):
                    def propose(self, num_reqs, num_tokens):
                        batch_desc, _ = dispatch_cg_and_sync_dp(self.cg_manager, num_reqs, num_tokens)
                        return self._build_attn_metadata(num_tokens=batch_desc.num_tokens)
                return InFunction


            class Outer:
                class Inner(MidSpeculator):
                    def propose(self):
                        return build_attn_metadata()

                def not_a_speculator(self):
                    return build_attn_metadata()
        """,
            }
        ),
    )
    result = check_paths([tree / "fork"], use_cache=False)
    assert [(f.line, f.code, f.symbol) for f in result.findings] == [
        (10, "SG101", "InTry.propose"),
        (16, "SG102", "InIf._build_attn_metadata"),
        (17, "SG104", "InIf._build_attn_metadata"),
        (24, "SG103", "factory.<locals>.InFunction.propose"),
        (31, "SG101", "Outer.Inner.propose"),
    ]


def test_a_method_of_an_imported_instance_is_not_the_sink(tmp_path: Path) -> None:
    """Issue 12 item 10: `builders = _B()` in the checked tree; `builders.build_attn_metadata()` is its method,
    while the same call through an imported module still is the sink."""
    tree = write_tree(
        tmp_path,
        pkg(
            {
                "fork/registry.py": """
            class _B:
                def build_attn_metadata(self, **kwargs):
                    return kwargs

            builders = _B()
        """,
                "fork/attn/__init__.py": "",
                "fork/attn/utils.py": "def build_attn_metadata(**kwargs):\n    return kwargs\n",
                "fork/user.py": """
            from fork.registry import builders
            from fork.attn import utils
            from fork.spec.speculator import DraftModelSpeculator

            class S(DraftModelSpeculator):
                def propose(self):
                    builders.build_attn_metadata(num_reqs=1)
                    return utils.build_attn_metadata(num_reqs=1)
        """,
            }
        ),
    )
    assert codes(tree, "fork/user.py") == [("user.py", "SG101", 9)]


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_script_folders_with_the_same_module_name_never_depend_on_argument_order(
    tmp_path: Path, order: tuple[str, str]
) -> None:
    """Issue 12 item 14: a/ and b/ (not packages) each have a speculator.py; a/drafter.py imports a/'s."""
    drafter = """
        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
        from speculator import Drafter

        class Mine(Drafter):
            def propose(self):
                return build_attn_metadata()
    """
    tree = write_tree(
        tmp_path,
        {
            "a/speculator.py": "class Drafter:\n    def _build_attn_metadata(self):\n        pass\n",
            "a/drafter.py": drafter,
            "b/speculator.py": "from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator\n"
            "class Drafter(DraftModelSpeculator):\n"
            "    def propose(self):\n"
            "        return self._build_attn_metadata()\n",
            "b/drafter.py": drafter,
        },
    )
    result = check_paths([tree / order[0], tree / order[1]], use_cache=False)
    assert [(Path(f.path).relative_to(tree).as_posix(), f.code) for f in result.findings] == [("b/drafter.py", "SG101")]


def test_a_namespace_portion_inside_a_regular_package_is_part_of_it(tmp_path: Path) -> None:
    """SGLang 0.5.23's sglang/multimodal_gen/runtime/ has no __init__.py; Python imports its files as
    `sglang.multimodal_gen.runtime.x` (PEP 420), and so must the index: a relative import from there finds its
    base in the checked tree, a speculator is known as one, and no "cannot locate" note is printed."""
    from specguard.program.modules import module_name

    root = write_tree(
        tmp_path,
        pkg(
            {
                "fork/runtime/deep/base.py": "from fork.spec.speculator import DraftModelSpeculator\n"
                "class Middle(DraftModelSpeculator):\n    pass\n",
                "fork/runtime/other/user.py": """
                from ..deep.base import Middle
                from vllm.v1.attention.backends.utils import build_attn_metadata

                class Spec(Middle):
                    def propose(self):
                        return build_attn_metadata(common_attn_metadata=None)
                """,
            }
        ),
    )
    user = root / "fork/runtime/other/user.py"
    assert module_name(user) == ("fork.runtime.other.user", False, root.resolve())
    result = check_paths([root / "fork"], use_cache=False)
    assert not [note for note in result.notes if "cannot locate" in note], result.notes
    assert [(Path(f.path).name, f.code) for f in result.findings] == [("user.py", "SG101")]
