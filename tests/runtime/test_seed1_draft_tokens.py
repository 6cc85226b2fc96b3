"""The first seed (DFlash, DP>1) reproduced on CPU against vLLM 0.28.0's shared draft-metadata helper and
the same inputs through vLLM 0.33.0's fixed helper: G4 at the helper, G0 at the builder the draft group
hands its metadata to (an out-of-tree backend's, deployed with FULL and PIECEWISE graphs)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from sg_runtime_helpers import REPO, old_vllm_path, run_in_venv

PROBE = Path(__file__).with_name("seed1_probe.py")
G0_SITE = "G0:ProbeBuilder.build(draft)"
G5_SITE = "G5:ProbeBuilder.build(draft)"  # the draft step's lengths (the first step of its chain)
G4_SITE_028 = "G4:DraftModelSpeculator._build_draft_attn_metadata"


@functools.cache  # one interpreter per vLLM version (importing vLLM takes most of its time)
def _probe(extra_path: str | None) -> dict[tuple[str, str], dict]:
    env = dict(os.environ)
    paths = [p for p in (extra_path, str(REPO), env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    proc = run_in_venv([str(PROBE)], env)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {(r["guard"], r["mode"]): r for r in results}


def test_vllm_0_28_piecewise_dp_padding_trips_g4_and_g0() -> None:
    results = _probe(old_vllm_path())
    piece = results[("raise", "PIECEWISE")]
    # every check finds its target in 0.28.0 too, under that version's names
    assert piece["skipped"] == [], piece["skipped"]
    installed = " ".join(piece["installed"])
    for check in (
        "G0@AttentionMetadataBuilder.build",
        "G1+G3@FlashInferMLAImpl.forward_mqa",
        "G2@flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla",
        "G3@MLAAttentionSpec.merge",
        "G4@DraftModelSpeculator._build_draft_attn_metadata",
    ):
        assert check in installed
    assert piece["raised"] == "SpecGuardViolation", piece
    assert piece["builder_saw"] == []  # stopped before the draft group's backend saw the padded count
    msg = piece["message"]
    assert "[specguard G4 draft token count] DraftModelSpeculator._build_draft_attn_metadata" in msg
    assert "DFlashSpeculator, cudagraph mode PIECEWISE" in msg
    assert "num_tokens handed to build_attn_metadata (52) != real query tokens query_start_loc[-1] (48)" in msg
    assert "4 padding tokens (dispatched with 48 tokens, descriptor carries 52 after DP sync over dp_size=2)" in msg
    assert "SG103 padded-token-count" in msg
    # warn mode: both checks see it, count it, and the backend builds as it would unguarded
    warn = results[("warn", "PIECEWISE")]
    assert warn["raised"] is None and warn["builder_saw"] == [52]
    assert warn["stats"]["violations"] == {G0_SITE: 1, G4_SITE_028: 1}
    # FULL graphs replay the captured padded shape, eager has no DP padding: both pass, G0 included
    for guard in ("raise", "warn"):
        full, eager = results[(guard, "FULL")], results[(guard, "NONE")]
        assert full["raised"] is None and full["descriptor_tokens"] == 52 and full["builder_saw"] == [52]
        assert eager["raised"] is None and eager["descriptor_tokens"] == 48 and eager["builder_saw"] == [48]
        for r in (full, eager):
            assert r["stats"]["violations"] == r["stats"]["skips"] == r["stats"]["guard_errors"] == {}, r
            assert r["stats"]["checks_run"] == {G0_SITE: 1, G4_SITE_028: 1, G5_SITE: 1}


def _healthy_runs_are_the_same_off_warn_and_raise(results: dict) -> None:
    """The differential: where the guard finds nothing to stop, the helper, vLLM's build_attn_metadata
    and the DP dispatch return the same, and the backend is handed the same, with the guard off, warn
    and raise."""
    keys = ("raised", "descriptor_tokens", "built_layers", "builder_saw")
    for mode in ("FULL", "NONE"):
        off = {k: results[("off", mode)][k] for k in keys}
        assert off["built_layers"] == ["draft.layers.0.attn"]
        for guard in ("warn", "raise"):
            assert {k: results[(guard, mode)][k] for k in keys} == off, (guard, mode)


def test_vllm_0_28_guard_off_warn_raise_agree_on_healthy_steps() -> None:
    results = _probe(old_vllm_path())
    _healthy_runs_are_the_same_off_warn_and_raise(results)
    off, warn = results[("off", "PIECEWISE")], results[("warn", "PIECEWISE")]
    assert off["builder_saw"] == warn["builder_saw"] == [52]  # warn mode reports, vLLM goes on as it would
    assert off["stats"]["checks_run"] == {}


def test_startup_line_says_what_can_fire_on_each_release() -> None:
    """Issue 12 item 7: G4 and G3's DCP clause are live on 0.28.0 and regression nets on 0.33.0."""
    old = _probe(old_vllm_path())[("raise", "startup")]["line"]
    new = _probe(None)[("raise", "startup")]["line"]
    assert "on vLLM 0.28.0: live [G0 metadata boundary, G1 FlashInfer paged wrappers, G2 MLA launch geometry, " in old
    assert "G3 non-causal DCP support, G4 draft token count, G5 draft lengths]" in old
    assert "G2 ragged decode under DCP (the MLA builder declares uniform query lengths" in old
    assert "on vLLM 0.33.0: live [G0 metadata boundary, G1 FlashInfer paged wrappers, G2 MLA launch geometry, " in new
    assert "G2 ragged decode under DCP, G3 layer causality, G5 draft lengths]" in new
    assert "G4 draft token count (the shared helper already hands the real count outside FULL graphs)" in new
    for line in (old, new):
        assert "recorded only, never raised [G3 KV-group merge]" in line


def test_vllm_0_28_runner_entry_with_the_seed_numbers_is_stopped_by_g0() -> None:
    direct = _probe(old_vllm_path())[("raise", "build_attn_metadata")]
    assert direct["raised"] == "SpecGuardViolation" and direct["builder_saw"] == []
    assert direct["message"].startswith(
        "[specguard G0 attention metadata boundary] ProbeBuilder.build(target) (layers draft.layers.0.attn): "
        "query_start_loc_cpu[num_reqs] (48) != num_actual_tokens (52) for 12 requests outside FULL CUDA graphs"
    )
    assert "SG103 padded-token-count" in direct["message"]


def test_vllm_0_33_same_inputs_pass() -> None:
    results = _probe(None)
    _healthy_runs_are_the_same_off_warn_and_raise(results)
    for mode in ("PIECEWISE", "FULL", "NONE"):
        assert results[("off", mode)]["builder_saw"] == results[("raise", mode)]["builder_saw"]
    for guard in ("raise", "warn"):
        for mode in ("PIECEWISE", "FULL", "NONE"):
            r = results[(guard, mode)]
            assert any("G4@DraftModelSpeculator._build_attn_metadata" in c for c in r["installed"]), r
            assert r["raised"] is None, r
            assert r["stats"]["violations"] == r["stats"]["skips"] == r["stats"]["guard_errors"] == {}, r
            assert r["stats"]["checks_run"] == {
                G0_SITE: 1,
                "G4:DraftModelSpeculator._build_attn_metadata": 1,
                G5_SITE: 1,
            }, r
            assert r["builder_saw"] == [52 if mode == "FULL" else 48]
    assert results[("raise", "PIECEWISE")]["descriptor_tokens"] == 52
    assert results[("raise", "build_attn_metadata")]["raised"] == "SpecGuardViolation"
