"""Saved conversations: each one a JSON transcript (the exporter's format) in the data dir."""
