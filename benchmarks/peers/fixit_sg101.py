"""The closest one-rule fixit equivalent of specguard's SG101 (metadata-outside-helper).

Used only by benchmarks/analyzer_vs_peers.py. Flags a call of the attention-metadata sink
`build_attn_metadata` (as a plain name, not an object's method) inside a method of a class, except a
capture-time builder that passes `for_cudagraph_capture=True`. specguard's rule also follows the class's
ancestry to the speculator base and exempts the base's own helpers; this rule fires on a superset.
"""

from __future__ import annotations

import libcst as cst
from fixit import Invalid, LintRule, Valid


class MetadataOutsideHelper(LintRule):
    MESSAGE = "a method calls build_attn_metadata itself instead of the speculator base's shared helper"

    VALID = [
        Valid("def f():\n    build_attn_metadata(x)\n"),
        Valid("class A:\n    def f(self):\n        self.builder.build_attn_metadata(x)\n"),
        Valid("class A:\n    def f(self):\n        build_attn_metadata(x, for_cudagraph_capture=True)\n"),
    ]
    INVALID = [
        Invalid("class A(B):\n    def propose(self):\n        return build_attn_metadata(attn_groups=g)\n"),
    ]

    def __init__(self) -> None:
        super().__init__()
        # One entry per enclosing class or function body: True for a class, False for a function. A call
        # is in a method when some enclosing function sits directly in a class (semgrep's pattern-inside
        # matches nested functions of a method too).
        self._scopes: list[bool] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._scopes.append(True)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._scopes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(False)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def _in_method(self) -> bool:
        scopes = self._scopes
        return any(not scopes[i] and scopes[i - 1] for i in range(1, len(scopes)))

    def visit_Call(self, node: cst.Call) -> None:
        if not (isinstance(node.func, cst.Name) and node.func.value == "build_attn_metadata"):
            return
        for arg in node.args:
            if (
                arg.keyword is not None
                and arg.keyword.value == "for_cudagraph_capture"
                and isinstance(arg.value, cst.Name)
                and arg.value.value == "True"
            ):
                return
        if self._in_method():
            self.report(node)
