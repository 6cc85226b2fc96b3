"""A small hand-written fork of vLLM's GPU model runner in which every specguard rule for vLLM fires once."""
