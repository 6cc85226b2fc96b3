"""Model-runner level glue: explicit DP-attention padding, eager execution and
capture helpers used by the spec workers."""
