"""Model-runner and scheduler glue for DP-attention batches."""
