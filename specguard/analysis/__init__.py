"""The analysis pipeline: discover -> prefilter -> summarize (index) -> parse (libcst) -> rules."""
