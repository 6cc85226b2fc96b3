"""Fork-local speculator, model-state and attention helpers (blind test tree)."""
