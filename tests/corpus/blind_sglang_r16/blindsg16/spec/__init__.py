"""Draft workers for EAGLE-family speculative decoding."""
