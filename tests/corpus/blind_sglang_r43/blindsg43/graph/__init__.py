"""CUDA-graph runner extensions for the draft, draft-extend and verify passes."""
