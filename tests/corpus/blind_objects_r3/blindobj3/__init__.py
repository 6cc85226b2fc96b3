# SPDX-License-Identifier: Apache-2.0
"""Fork-local speculative decoding variants built on vLLM's GPU worker v2.

Modules:
  metadata_shims       shared helpers used by several draft workers
  plans                small dataclasses passed between propose() stages
  eager_drafters       drafters that build their own eager step metadata
  helper_overrides     drafters overriding the shared metadata helpers
  chain_base/leaf      a two-level drafter hierarchy split over modules
  padded_drafters      drafters that dispatch / pad draft batches
  dcp_prep             drafters carrying their own DCP-local length prep
  dcp_lengths          drafters forwarding DCP-local lengths to the helper
  kv_specs             KV-cache specs for draft-only layer groups
  flashinfer_mla_dcp   FlashInfer MLA impls for non-causal DCP decode
  bench_harness        micro-benchmark and probe utilities (not drafters)
"""
