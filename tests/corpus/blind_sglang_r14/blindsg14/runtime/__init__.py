"""Model-runner and graph-runner extensions."""
