"""`RuleContext.function_at`: the innermost function of a judgement's scope name that holds its line, found from an
index of the file's functions (a file of a thousand speculators with the same method names made a scan quadratic,
tests/test_large_files.py)."""

from __future__ import annotations

import ast

from specguard.file_facts import FileFacts
from specguard.findings import Judgement
from specguard.packs import load_pack
from specguard.rules.base import RuleContext

SOURCE = """\
def propose(n):
    def propose(m):
        return m

    return propose(n)


class A:
    def propose(self, n):
        x = 1
        return x

    def other(self):
        def propose():
            pass

        y = 2
        return y


class B:
    def propose(self, n):
        return n
"""


def _brute_force(tree: ast.Module, name: str, line: int) -> ast.AST | None:
    holding = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == name and node.lineno <= line <= node.end_lineno
    ]
    return max(holding, key=lambda node: node.lineno, default=None)


def test_the_innermost_function_of_the_name_holding_the_line() -> None:
    facts = FileFacts("m", (), frozenset(), frozenset(), frozenset(), frozenset(), False)
    ctx = RuleContext(None, facts, load_pack(), text=SOURCE)
    for scope in ("propose", "A.propose", "B.propose", "other", "A.missing"):
        for line in range(1, SOURCE.count("\n") + 2):
            judgement = Judgement("SG101", scope, (line, 0, line, 1), True)
            expected = _brute_force(ctx.tree, scope.rpartition(".")[2], line)
            assert ctx.function_at(judgement) is expected, (scope, line)
    # the nested `propose` inside `other`, and the module-level one around its namesake
    assert ctx.function_at(Judgement("SG101", "propose", (15, 0, 15, 1), True)).lineno == 14
    assert ctx.function_at(Judgement("SG101", "propose", (5, 0, 5, 1), True)).lineno == 1
    assert ctx.function_at(Judgement("SG101", "propose", (17, 0, 17, 1), True)) is None
