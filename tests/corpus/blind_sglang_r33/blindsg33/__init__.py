"""Tree speculation and DCP MLA ports built on top of SGLang's spec-v2 workers."""
