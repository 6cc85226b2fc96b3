"""blindsg1: fork-maintainer style extensions of SGLang 0.5.23 speculative
decoding (EAGLE v2 draft / verify, DP attention, decode context parallel).

Nothing here is imported eagerly; each module is a self-contained override
set that a deployment opts into via the plugin registry.
"""

__all__ = [
    "eagle_draft_dp",
    "draft_extend_dp",
    "verify_dp",
    "runner_fork",
    "graph_fallback",
    "flashinfer_fork",
    "mla_dcp_decode",
    "mla_dcp_tables",
    "mla_dcp_spec",
    "flashinfer_mla_dcp",
]
