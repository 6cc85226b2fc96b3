"""Fork model-runner and graph-runner subclasses."""
