"""Out-of-tree MLA attention backends for a DeepSeek serving fork (DCP work)."""
