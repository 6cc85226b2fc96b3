"""Draft / verify workers of the fork's overlap-scheduled speculative loop."""
