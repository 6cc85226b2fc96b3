"""Scheduler / overlap team: plan-ahead, routing, micro-batching, fallbacks."""
