"""blindsg25: speculative-decoding extensions for an SGLang 0.5.23 fork.

Subpackages:
    common   -- attention-metadata pre-planning and DP helpers
    utils    -- DCP length helpers and MLA kernel launch wrappers
    workers  -- draft / verify worker subclasses
    runners  -- model runner and eager runner subclasses
    backends -- MLA attention backend subclasses (DCP aware)
"""
