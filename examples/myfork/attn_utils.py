def build_attn_metadata(
    *, num_reqs, num_tokens, query_start_loc_cpu, seq_lens, dcp_local_seq_lens=None, for_cudagraph_capture=False
):
    """The metadata sink: every speculator must reach it through the base's shared helper."""
    return {"num_reqs": num_reqs, "num_tokens": num_tokens}
