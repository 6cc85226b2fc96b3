"""Draft-side planning glue (EAGLE v2 / multi-layer / frozen-KV forks)."""
