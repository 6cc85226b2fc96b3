"""Blind labelled corpus: vLLM 0.33.0 speculative-decoding shapes.

Static-analysis fixtures only; nothing here is meant to be imported or run.
Each labelled function carries an ``# idiom:`` line naming the real code its
shape is taken from and an ``# expect:`` line with the expected finding.
"""
