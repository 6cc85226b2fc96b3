"""Kestrel speculative-decoding workers (EAGLE v2 / MTP) and planning glue."""
