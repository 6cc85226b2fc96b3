"""DP-attention padding vs. pre-planned attention metadata."""
