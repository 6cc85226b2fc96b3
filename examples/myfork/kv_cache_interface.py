from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionSpec:
    block_size: int
    non_causal_multi_token_decode: bool = False


@dataclass(frozen=True)
class MLAAttentionSpec(AttentionSpec):
    @classmethod
    def merge(cls, specs):
        return cls(
            block_size=specs[0].block_size,
            # SG201: one non-causal draft layer makes the whole group non-causal
            non_causal_multi_token_decode=any(s.non_causal_multi_token_decode for s in specs),
        )
