"""Draft-side extensions: tree drafting, block drafters, overlap workers."""
