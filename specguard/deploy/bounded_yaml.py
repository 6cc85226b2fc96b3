"""YAML read safely and within bounds: PyYAML's safe loader, refusing while it composes the document (before any
value is built) what would cost far more than the text it came from.

YAML's aliases share a node, so a few hundred bytes of anchors that each list the one before nine times stand for
billions of values: everything that walks the data (json.dumps of a config value, merge keys, str of a list)
expands them. The document is measured as it would be expanded (each alias counts what its anchor holds), and
refused past MAX_VALUES values or MAX_TEXT characters of scalars, past MAX_DEPTH levels of nesting (aliases
included), or when an alias refers to the node it sits in (a recursive anchor, which nothing can expand).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import Node, ScalarNode

from specguard._files import DATA_CAP
from specguard._nesting import MAX_DEPTH, NESTED_TOO_DEEPLY

MAX_VALUES = 100_000  # far more than a serving config holds; keys count as values
MAX_TEXT = DATA_CAP  # no more text, expanded, than the largest file specguard reads


@dataclass
class _Measure:
    """What a node expands to: values (itself and everything under it), characters of scalars, and levels of
    collections (0 for a scalar)."""

    values: int = 1
    text: int = 0
    depth: int = 0


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._measured: dict[Node, _Measure] = {}  # nodes composed whole
        self._open: list[_Measure] = []  # the collections being composed, outermost first
        self._values = 0
        self._text = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)  # an unknown anchor is PyYAML's own error
            if target is not None:
                measure = self._measured.get(target)
                if measure is None:  # its anchor is still being composed: the alias is inside it
                    raise ComposerError(None, None, f"the alias *{event.anchor} refers to itself", event.start_mark)
                self._add(measure, event)
            return super().compose_node(parent, index)
        collection = isinstance(event, (MappingStartEvent, SequenceStartEvent))
        if collection and len(self._open) >= MAX_DEPTH:
            raise ComposerError(None, None, f"{NESTED_TOO_DEEPLY} (over {MAX_DEPTH} levels)", event.start_mark)
        own = _Measure()
        self._add(own, event)
        if collection:
            self._open.append(_Measure(values=1, depth=1))
        node = super().compose_node(parent, index)
        if collection:
            own = self._open.pop()
        elif isinstance(node, ScalarNode):
            own = _Measure(text=len(node.value))
            self._add(_Measure(values=0, text=own.text), event)
        self._measured[node] = own
        if self._open:
            self._child(own)
        return node

    def _add(self, measure: _Measure, event: Any) -> None:
        """Count what an alias or a new node adds to the document, and to the collection it sits in."""
        self._values += measure.values
        self._text += measure.text
        if self._values > MAX_VALUES:
            raise ComposerError(
                None, None, f"more than {MAX_VALUES:,} values once aliases are expanded", event.start_mark
            )
        if self._text > MAX_TEXT:
            raise ComposerError(
                None, None, f"more than {MAX_TEXT >> 20} MiB of text once aliases are expanded", event.start_mark
            )
        if isinstance(event, AliasEvent):
            if len(self._open) + measure.depth > MAX_DEPTH:
                raise ComposerError(
                    None,
                    None,
                    f"{NESTED_TOO_DEEPLY} once aliases are expanded (over {MAX_DEPTH} levels)",
                    event.start_mark,
                )
            if self._open:
                self._child(measure)

    def _child(self, measure: _Measure) -> None:
        parent = self._open[-1]
        parent.values += measure.values
        parent.text += measure.text
        parent.depth = max(parent.depth, measure.depth + 1)


def parse_yaml(text: str) -> Any:
    """The data of one YAML document, as yaml.safe_load builds it; raises yaml.YAMLError for what it refuses,
    and ValueError or OverflowError for a scalar Python cannot hold (a 6,000-digit integer, a 13th month)."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
