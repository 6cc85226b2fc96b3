"""Draft-side services for EAGLE v2 / MTP / frozen-KV MTP / multi-layer EAGLE.

The upstream workers are split into mixins, strategy objects and small
service classes that hold the draft runner, the attention backends and the
parallel settings as fields.
"""
