"""DP-attention helpers for the fork's speculative workers."""
