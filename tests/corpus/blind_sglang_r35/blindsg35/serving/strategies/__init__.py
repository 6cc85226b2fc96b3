"""Draft strategies chosen by :func:`blindsg35.serving.config.select_draft_strategy`."""
