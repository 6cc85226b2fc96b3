"""G4: the first seed (DFlash, DP>1) reproduced on CPU against vLLM 0.28.0's shared draft-metadata helper,
and the same inputs through vLLM 0.33.0's fixed helper."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sg_runtime_helpers import REPO, old_vllm_path, run_in_venv

PROBE = Path(__file__).with_name("seed1_probe.py")


def _probe(extra_path: str | None) -> dict[str, dict]:
    env = dict(os.environ)
    paths = [p for p in (extra_path, str(REPO), env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    proc = run_in_venv([str(PROBE)], env)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["mode"]: r for r in results}


def test_vllm_0_28_piecewise_dp_padding_trips_g4() -> None:
    results = _probe(old_vllm_path())
    piece = results["PIECEWISE"]
    # every check finds its target in 0.28.0 too, under that version's names
    assert piece["skipped"] == [], piece["skipped"]
    installed = " ".join(piece["installed"])
    for check in (
        "G1+G3@FlashInferMLAImpl.forward_mqa",
        "G2@flashinfer_mla.trtllm_batch_decode_with_kv_cache_mla",
        "MLAAttentionSpec.merge",
        "G4@DraftModelSpeculator._build_draft_attn_metadata",
    ):
        assert check in installed
    assert piece["descriptor_tokens"] == 52  # the DP sync padded this rank's 48 tokens to the peer's 52
    assert piece["raised"] == "SpecGuardViolation", piece
    msg = piece["message"]
    assert "[specguard G4 draft token count] DraftModelSpeculator._build_draft_attn_metadata" in msg
    assert "DFlashSpeculator, cudagraph mode PIECEWISE" in msg
    assert "num_tokens handed to build_attn_metadata (52) != real query tokens query_start_loc[-1] (48)" in msg
    assert "4 padding tokens (dispatched with 48 tokens, descriptor carries 52 after DP sync over dp_size=2)" in msg
    assert "SG103 padded-token-count" in msg
    # FULL graphs replay the captured padded shape, eager has no DP padding: both pass
    assert results["FULL"]["raised"] is None and results["FULL"]["descriptor_tokens"] == 52
    assert results["NONE"]["raised"] is None and results["NONE"]["descriptor_tokens"] == 48


def test_vllm_0_33_same_inputs_pass() -> None:
    results = _probe(None)
    for mode in ("PIECEWISE", "FULL", "NONE"):
        r = results[mode]
        assert any("G4@DraftModelSpeculator._build_attn_metadata" in c for c in r["installed"]), r
        assert r["raised"] is None, r
        assert r["stats"]["violations"] == {} and r["stats"]["guard_errors"] == {}, r
        assert r["stats"]["checks_run"] == {"G4:DraftModelSpeculator._build_attn_metadata": 1}, r
    assert results["PIECEWISE"]["descriptor_tokens"] == 52
