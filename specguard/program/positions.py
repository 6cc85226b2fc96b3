"""Line/column spans of a few nodes, without libcst's PositionProvider.

PositionProvider tracks line and column through every token of the module (0.5 s on a 65 KB file); this records
only token indices during one code generation pass and turns the few indices that findings need into positions.
The spans are the same "syntactic" spans PositionProvider reports (tests/test_positions.py compares them).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState

from specguard.lines import newlines_in


@dataclass(frozen=False)
class _TokenSpans(CodegenState):
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    _starts: list[int] = field(default_factory=list)

    # Every node: its whitespace-inclusive span, unless a syntactic one was recorded inside it.
    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append(len(self.tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._starts.pop()
        self.spans.setdefault(id(node), (start, len(self.tokens)))

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> Iterator[None]:
        start = len(self.tokens)
        yield  # no try/finally: after an error inside (a RecursionError), record nothing and let it propagate
        end = len(self.tokens)
        if start_node is not None:
            start = self.spans[id(start_node)][0]
        if end_node is not None:
            end = self.spans[id(end_node)][1]
        self.spans[id(node)] = (start, end)


Span = tuple[int, int, int, int]  # start line, start column (1-based), end line, end column (1-based)


def spans(module: cst.Module, nodes: Sequence[cst.CSTNode]) -> list[Span]:
    state = _TokenSpans(default_indent=module.default_indent, default_newline=module.default_newline)
    module._codegen(state)
    wanted = sorted({i for node in nodes for i in state.spans[id(node)]})
    where: dict[int, tuple[int, int]] = {}
    line, col, done = 1, 0, 0
    for index in wanted:  # walk the tokens once, stopping at each wanted index
        text = "".join(state.tokens[done:index])
        ends = newlines_in(text)  # as CPython counts lines: a lone CR ends one too
        if ends:
            line += ends
            col = len(text) - (max(text.rfind("\n"), text.rfind("\r")) + 1)
        else:
            col += len(text)
        done = index
        where[index] = (line, col + 1)
    result = []
    for node in nodes:
        start, end = state.spans[id(node)]
        result.append((*where[start], *where[end]))
    return result
