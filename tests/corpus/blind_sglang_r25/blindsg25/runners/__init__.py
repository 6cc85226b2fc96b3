"""Model runner / phase runner subclasses."""
