"""Fork TP worker and scheduler-side DP-attention helpers."""
