from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla


class FlashInferMLAImpl:
    def forward_mqa(self, q, kv_cache, attn_metadata):
        decode = attn_metadata.decode
        block_table, seq_lens = decode.block_table, decode.seq_lens
        if not attn_metadata.causal:
            query_len = attn_metadata.num_decode_tokens // attn_metadata.num_decodes
            block_table = block_table.repeat_interleave(query_len, dim=0)
            seq_lens = seq_lens.repeat_interleave(query_len)
        extra_kwargs = {}
        if self.dcp_world_size > 1:
            extra_kwargs.update(
                enable_dcp=True,
                cp_world=self.dcp_world_size,
                cp_rank=self.dcp_rank,
                # SG202: still one bound per request while the rows above are one per query token
                causal_seqlens_kv_global=decode.dcp_tot_seq_lens,
            )
        return trtllm_batch_decode_with_kv_cache_mla(
            query=q,
            kv_cache=kv_cache,
            block_tables=block_table,
            seq_lens=seq_lens,
            **extra_kwargs,
        )
