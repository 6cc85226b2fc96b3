def prepare_dcp_local_seq_lens(out, seq_lens, num_reqs, cp_size, cp_rank, cp_interleave):
    """Rank-local sequence lengths under decode context parallelism."""
    return out
