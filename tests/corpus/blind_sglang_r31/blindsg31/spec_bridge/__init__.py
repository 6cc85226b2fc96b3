"""Ports of SGLang's spec-v2 draft workers onto the ROCm MLA backends."""
