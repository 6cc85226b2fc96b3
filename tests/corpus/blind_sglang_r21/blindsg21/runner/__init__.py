"""Fork ModelRunner / runner overrides around DP-attention padding."""
