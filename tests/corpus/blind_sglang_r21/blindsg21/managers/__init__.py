"""Fork TP worker overrides."""
