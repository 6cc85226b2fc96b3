"""Rollout engine: speculative decoding inside SGLang for RL post-training."""
