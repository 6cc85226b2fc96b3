"""A fork that moves a check into a pydantic `@field_validator` (issue 30; blind config set 3's forks): the validator
runs with the field's value and an `info` whose `data` holds the fields declared before it, as pydantic calls it, so
the moved check is judged like the original; one that reads fields pydantic has not validated yet gets their
defaults and refuses nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sg_mutate import fork, replace, rewrite

CHECK = """        tp = self.tensor_parallel_size
        pcp = self.prefill_context_parallel_size
        dcp = self.decode_context_parallel_size
        if pcp == 1:
            # DCP reuses the TP ranks when PCP is disabled.
            if tp % dcp != 0:
                raise ValueError(f"tp_size={tp} must be divisible by dcp_size={dcp}.")
        elif dcp not in (1, pcp, tp * pcp):
            raise ValueError(
                "When PCP is enabled, DCP must be disabled, span the PCP "
                "axis, or span the full TP x PCP axis. "
                f"Got TP={tp}, PCP={pcp}, DCP={dcp}; valid DCP sizes are "
                f"{sorted({1, pcp, tp * pcp})}."
            )
"""
MOVED = """
    @field_validator("{field}")
    @classmethod
    def _validate_dcp_layout(cls, value: int, info: ValidationInfo) -> int:
        tp = {tp}
        pcp = info.data.get("prefill_context_parallel_size", 1)
        dcp = {dcp}
        if pcp == 1:
            if tp % dcp != 0{stricter}:
                raise ValueError(f"tp_size={{tp}} {message}={{dcp}}.")
        elif dcp not in (1, pcp, tp * pcp):
            raise ValueError(
                "When PCP is enabled, DCP must be disabled, span the PCP "
                "axis, or span the full TP x PCP axis. "
                f"Got TP={{tp}}, PCP={{pcp}}, DCP={{dcp}}."
            )
        return value
"""


def _moved(
    tmp_path: Path, source: Path, field: str, stricter: str = "", message: str = "must be divisible by dcp_size"
) -> Path:
    tree = fork(source, tmp_path)
    if field == "decode_context_parallel_size":
        tp, dcp = 'info.data["tensor_parallel_size"]', "value"
    else:  # validated first: the DCP size is not in info.data yet
        tp, dcp = "value", 'info.data.get("decode_context_parallel_size", 1)'
    text = MOVED.format(field=field, tp=tp, dcp=dcp, stricter=stricter, message=message)
    change = replace(CHECK, "")
    rewrite(
        tree,
        "config/parallel.py",
        lambda t: change(t).replace("    def set_dcp_defaults(", text.lstrip("\n") + "\n    def set_dcp_defaults(", 1),
    )
    rewrite(
        tree,
        "config/parallel.py",
        replace("from pydantic import Field,", "from pydantic import Field, ValidationInfo,"),
    )
    return tree


@pytest.mark.parametrize(("dcp", "refused"), [("3", True), ("2", False), ("4", False)])
def test_a_check_moved_into_a_field_validator_is_judged(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path], tmp_path: Path, dcp: str, refused: bool
) -> None:
    tree = _moved(tmp_path, source_dir("0.31.0"), "decode_context_parallel_size")
    rc, out, _ = run_config("--vllm-source", str(tree), "--", "m", "-tp", "4", "-dcp", dcp)
    assert (f"decode-context-parallel-size={dcp}: CFG105 error" in out) is refused, out
    assert "CFG105 not judged" not in out, out
    if refused:
        assert "(config/parallel.py:" in out and "accepts: 1, 2, 4" in out, out


def test_a_stricter_reworded_validator_is_judged_by_meaning_and_the_fix_offers_what_it_accepts(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """Blind set 3's `r-fork031-dcp-ge`: the fork refuses DCP equal to TP, in its own words. The fix offers the sizes
    the statement that refuses this config accepts (before: only 1, as the sizes were judged against every raise
    reading the DCP size, some of which depend on the model)."""
    stricter, message = " or (dcp > 1 and dcp >= tp)", "must be divisible by and larger than dcp_size"
    tree = _moved(tmp_path, source_dir("0.31.0"), "decode_context_parallel_size", stricter, message)
    rc, out, _ = run_config("--vllm-source", str(tree), "--", "m", "-tp", "4", "-dcp", "4")
    assert "decode-context-parallel-size=4: CFG105 error" in out, out
    assert "judged by meaning" in out and "accepts: 1, 2\n" in out, out


def test_a_validator_that_runs_before_the_fields_it_reads_refuses_nothing(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    tree = _moved(tmp_path, source_dir("0.31.0"), "tensor_parallel_size")
    rc, out, _ = run_config("--vllm-source", str(tree), "--", "m", "-tp", "4", "-dcp", "3")
    assert "CFG105 error" not in out and "CFG105 not judged" not in out, out


def test_a_reworded_check_offers_every_size_it_accepts(  # type: ignore[no-untyped-def]
    run_config, source_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    """Issue 30's case: a fork whose DCP check is only reworded was told only 1 is accepted for `-tp 4 -dcp 3`;
    vLLM accepts 1, 2 and 4 there, and specguard judges `-dcp 2` clean."""
    tree = _moved(tmp_path, source_dir("0.31.0"), "decode_context_parallel_size", message="does not split into dcp")
    rc, out, _ = run_config("--vllm-source", str(tree), "--", "m", "-tp", "4", "-dcp", "3")
    assert "decode-context-parallel-size=3: CFG105 error" in out and "judged by meaning" in out, out
    assert "accepts: 1, 2, 4\n" in out, out
