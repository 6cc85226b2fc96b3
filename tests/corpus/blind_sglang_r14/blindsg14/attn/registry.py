"""Name -> backend class table for the fork's ``--attention-backend`` values."""

from __future__ import annotations

from blindsg14.attn import cutedsl_dcp_fork, flashinfer_mla_dcp_fork, trtllm_dcp_fork

FORK_MLA_BACKENDS = {
    "fork_trtllm_mla_hoisted": trtllm_dcp_fork.HoistedLensTRTLLMMLABackend,
    "fork_trtllm_mla_sinks": trtllm_dcp_fork.AttentionSinkTRTLLMMLABackend,
    "fork_trtllm_mla_refuse_dcp_spec": trtllm_dcp_fork.RefusingDcpVerifyTRTLLMMLABackend,
    "fork_cutedsl_mla_verify": cutedsl_dcp_fork.DcpVerifyCuteDslMLABackend,
    "fork_flashinfer_mla_csr": flashinfer_mla_dcp_fork.CsrShardedFlashInferMLABackend,
    "fork_flashinfer_mla_staged": flashinfer_mla_dcp_fork.StagedLocalPlanFlashInferMLABackend,
}


def resolve_fork_backend(name: str):
    try:
        return FORK_MLA_BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown fork MLA backend {name!r}") from None
