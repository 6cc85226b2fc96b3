"""`specguard check` on SGLang 0.5.23's real source (issues 27 and 29): the whole tree is found and read, the PEP
420 namespace portion inside a regular package (`sglang/multimodal_gen/runtime/` has no `__init__.py`) included,
with no "cannot locate" note and no internal error; and the findings are exactly the ones written below from
reading the code. (The note's condition, a subclass naming a pack name under an unlocated ancestor, is met nowhere
in SGLang even where a module were not located: `tests/test_resolution.py` pins how a namespace portion's modules
are named and located.)"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, unpacked

KIT = "sglang/test/kits/attention_unittest/runner_modes/speculative_draft_runner.py"
TRTLLM_MLA = "sglang/srt/layers/attention/trtllm_mla_backend.py"
# SG203 not decided in this file: FlashInferMLAIndicesUpdaterPrefill.update plans its paged prefill with the host
# lengths it is handed (`kv_len_arr_cpu`) where `attn_dcp_metadata` is None, and drops them where it is set (under
# DCP); which of the two a DCP run takes is its callers' to say (another object's), which the evaluation does not
# follow
FLASHINFER_MLA = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
# FlashMLABackend under DCP: its bf16 decode, its verify and draft extend and the split-KV schedules it plans hand
# `flash_mla_with_kvcache` / `get_mla_metadata` the whole lengths (with a page table of every rank's pages) while
# each rank's MLA cache holds its cyclic share; only the FP8 branch refuses DCP (sgl-project/sglang#39970: "FlashMLA
# currently receives global sequence lengths and global cache page tables under DCP"; #37735 proposes refusing it).
# Found since the pack names FlashMLA's launch by its signature (`[mla] launches`).
FLASHMLA = "sglang/srt/layers/attention/flashmla_backend.py"
# The findings per release, each read in the code. SG106: the EAGLE draft path plans the real batch (and marks it
# ready, or hands `skip_attn_backend_init=True` to the forward in older releases), and the model runner pads it for
# DP attention without planning again (sgl-project/sglang#38580 quotes 0.5.23's). SG203: 0.5.18's trtllm MLA decode
# under DCP walks the whole sequence's lengths, and its draft extend reaches the kernel with a multi-token query and
# no global bound (sgl-project/sglang#33926, which 0.5.23 has). Then the sites listed as not decided.
RELEASES = {
    "0.5.23": (
        {
            # EagleDraftWorker.draft: `init_forward_metadata` at 711, `mark_forward_metadata_ready()` at 712
            ("sglang/srt/speculative/eagle_worker_v2.py", 714, "SG106"),
            # EagleDraftWorker._draft_extend_for_decode: planned and marked in prepare_for_draft_extend
            ("sglang/srt/speculative/eagle_worker_v2.py", 1211, "SG106"),
            # FrozenKVMTPDraftWorker.draft_forward: `_init_frozen_kv_metadata` plans (341) and marks the batch ready
            # without `replan_equivalent`, then `draft_model_runner.forward` pads it for DP attention and skips the
            # plan (found once a batch handed in stopped carrying its class's `spec_info = None`, which failed the
            # method's `assert isinstance(spec_info, ...)` on every path)
            ("sglang/srt/speculative/frozen_kv_mtp_worker_v2.py", 579, "SG106"),
            # the attention unit-test kit's eager draft runner, which mirrors the production path ("mirror
            # production: pre-plan marks") with a batch the rule cannot tell is never synchronised across DP ranks
            (KIT, 428, "SG106"),
            (FLASHMLA, 131, "SG203"),  # init_forward_metadata_out_graph: the graph replay's schedule
            (FLASHMLA, 259, "SG203"),  # init_forward_metadata: the draft extend's schedule
            (FLASHMLA, 495, "SG203"),  # forward_decode (bf16)
            (FLASHMLA, 570, "SG203"),  # forward_extend: the verify's and draft extend's launch
        },
        {
            # the multi-layer EAGLE worker's draft extend: more paths through its helpers' tests than the evaluation
            # follows one by one (its own tests alone leave the readiness mark joined)
            "sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
            # the Dots hybrid attention backend's `forward`: it re-plans after DP padding and hands an unannotated
            # batch on to another backend's `forward`, whose class (and so predicate) the evaluation cannot tell
            "sglang/srt/layers/attention/dots_hybrid_backend.py",
            FLASHINFER_MLA,
            # the DSA backend's DCP helper `dcp_trtllm_sparse_attention`: it launches the MLA entry with the
            # `seq_lens` it is handed, and its one caller (`dsa_backend.py`, under `self.dcp_size > 1`) lives in a
            # module the helper's file does not name (read since a file is read for an MLA launch beside a DCP size)
            "sglang/srt/layers/attention/dsa/dsa_dcp.py",
        },
    ),
    "0.5.18": (
        {
            ("sglang/srt/speculative/eagle_worker_v2.py", 542, "SG106"),  # the same two, before 0.5.23's lines moved
            ("sglang/srt/speculative/eagle_worker_v2.py", 935, "SG106"),
            ("sglang/srt/speculative/frozen_kv_mtp_worker_v2.py", 560, "SG106"),  # the same as 0.5.23's 579
            (KIT, 423, "SG106"),
            # MultiLayerEagleDraftWorker._draft_extend_for_decode's eager loop: each step plans its runner's backend
            # for the unpadded batch (858) and runs `forward` (861), which pads it for DP attention; the comment says
            # the batch is "left unmarked", but `prepare_for_draft_extend` marked it (not on NPU) without
            # `replan_equivalent`, so the forward does not plan again (the shape of #38580; decided since the
            # twenty-fourth session, listed as not decided before)
            ("sglang/srt/speculative/multi_layer_eagle_worker_v2.py", 861, "SG106"),
            # TRTLLMMLABackend.forward_decode: `metadata.seq_lens_k` (the whole lengths, hoisted) or, where it is
            # None, `forward_batch.seq_lens`, beside a page table built from the same whole lengths, while the MLA
            # cache is written cyclically sharded across the DCP ranks (`set_mla_kv_concat_q_fp8(dcp_world_size=)`)
            (TRTLLM_MLA, 1181, "SG203"),
            # TRTLLMMLABackend.forward_extend's draft extend: the query viewed as [bs, tokens_per_seq, ...] reaches
            # the kernel under DCP with no global bound, and 0.5.18's refusal keys on `cp_world`/`return_lse`,
            # which draft extend does not pass (the review of sgl-project/sglang#33926 names it: "`causal_seqs is
            # not None` proxies `q_len > 1`, but `draft_extend_v2` breaks it"; 0.5.23 keys on `q_len > 1`)
            (TRTLLM_MLA, 1430, "SG203"),
            # FlashInferMLAIndicesUpdaterDecode.call_begin_forward: under DCP its decode branch rewrites `kv_lens` to
            # this rank's share in place (`plan_dcp_decode_metadata`), and its speculative branch (`spec_info` set)
            # plans the same `paged_kernel_lens`, whole, beside the draft's `kv_indptr` (0.5.23 takes that branch's
            # lengths from the draft's `kv_indptr`)
            (FLASHINFER_MLA, 851, "SG203"),
            # CuteDslMLABackend's and TokenspeedMLABackend's `_apply_cuda_graph_metadata` under DCP: the draft
            # extend replay copies the whole lengths into the captured `metadata.seq_lens_k`, which the replayed
            # launch reads as this rank's, beside a page table built from this rank's share (0.5.23's
            # `TRTLLMMLABackend._apply_dcp_cuda_graph_metadata` stores the whole ones in `global_seq_lens_k` and
            # the share in `seq_lens_k` on that branch); found since an element of a container the instance holds,
            # read by a key the code names (`self.decode_cuda_graph_metadata[bs]`), is one object
            ("sglang/srt/layers/attention/cutedsl_mla_backend.py", 221, "SG203"),
            ("sglang/srt/layers/attention/tokenspeed_mla_backend.py", 428, "SG203"),
            (FLASHMLA, 126, "SG203"),  # the same four as 0.5.23's
            (FLASHMLA, 235, "SG203"),
            (FLASHMLA, 464, "SG203"),
            (FLASHMLA, 538, "SG203"),
        },
        {FLASHINFER_MLA},
    ),
    "0.5.6": (
        {
            # EAGLEWorker.forward_draft_extend_after_decode: planned at 984, then `forward(..., skip_attn_backend_init
            # =True)`
            ("sglang/srt/speculative/eagle_worker.py", 987, "SG106"),
            # EAGLEWorkerV2's draft extend: planned in eagle_info_v2.py's `prepare_for_extend_to_fill_draft_kvcache`
            ("sglang/srt/speculative/eagle_worker_v2.py", 514, "SG106"),
        },
        {
            # EAGLEWorker.draft hands the planned batch to its `draft_forward`, and 0.5.6's batch has no
            # `needs_forward_metadata_init()` to ask (its steps pass `skip_attn_backend_init=True` inside)
            # (0.5.6's attention backend tests plan a batch and run a backend's `forward` with it: each builds its
            # `ForwardBatch(...)` with no per-rank DP counts, so nothing pads it, and each is decided clean)
            "sglang/srt/speculative/eagle_worker.py",
        },
    ),
}


def test_sglang_0_5_23_is_read_whole_without_a_note() -> None:
    tree = unpacked("sglang", "0.5.23")
    assert not (tree / "multimodal_gen" / "runtime" / "__init__.py").exists()  # the namespace portion is there
    assert (tree / "multimodal_gen" / "__init__.py").exists()
    out = run_cli("check", "sglang", "--no-cache", "--show-files", cwd=tree.parent)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    assert len(out.stdout.splitlines()) == len(list(tree.rglob("*.py")))


@pytest.mark.parametrize("version", list(RELEASES))
def test_a_release_gives_exactly_its_findings(version: str) -> None:
    tree = unpacked("sglang", version)
    findings, undecided = RELEASES[version]
    out = run_cli("check", "sglang", "--no-cache", "--format", "json", "-v", cwd=tree.parent)
    assert out.returncode == 1, out.stderr
    found = {(_in_tree(f["filename"]), f["location"]["row"], f["code"]) for f in json.loads(out.stdout)}
    assert found == findings
    said = [line.split("not decided: ", 1)[1] for line in out.stderr.splitlines() if "not decided: " in line]
    assert {_in_tree(line.split(":", 1)[0]) for line in said} == undecided, out.stderr
    assert "internal error" not in out.stderr and "cannot locate" not in out.stderr


def _in_tree(path: str) -> str:
    """A reported path from the package folder on (`sglang/srt/...`), however the run wrote it."""
    return path if path.startswith("sglang/") else "sglang/" + path.split("/sglang/", 1)[1]
