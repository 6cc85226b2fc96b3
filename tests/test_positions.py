"""Our token-index spans agree with libcst's PositionProvider on every finding of the real trees."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from specguard.program.positions import spans


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0"])
def test_spans_match_position_provider(version, vllm_source) -> None:  # type: ignore[no-untyped-def]
    root = vllm_source(version)
    for rel in [
        "v1/worker/gpu/spec_decode/speculator.py",
        "v1/kv_cache_interface.py",
        "v1/attention/backends/mla/flashinfer_mla.py",
    ]:
        module = cst.parse_module((root / rel).read_text())
        nodes = [n for n in _walk(module) if isinstance(n, (cst.Call, cst.Arg, cst.Name, cst.FunctionDef))][::7]
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        got = spans(module, nodes)
        for node, span in zip(nodes, got, strict=True):
            r = expected[node]
            assert span == (r.start.line, r.start.column + 1, r.end.line, r.end.column + 1), (rel, node)


def _walk(node: cst.CSTNode):  # type: ignore[no-untyped-def]
    yield node
    for child in node.children:
        yield from _walk(child)
