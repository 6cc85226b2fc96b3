"""blindsg5: fork-local speculative-decoding glue on top of SGLang.

``dp``  -- EAGLE draft/verify paths that plan attention metadata around DP
           attention padding.
``dcp`` -- MLA decode backends under decode context parallelism.
"""
