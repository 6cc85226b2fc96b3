"""Runtime glue: out-of-forward planning helpers shared by the spec workers."""
