"""Labelled test tree: MTP/NextN drafting under DP attention (``mtp``) and a
decode-context-parallel port of SGLang's MLA backends (``dcp``).

Never executed; the modules only have to parse.
"""
