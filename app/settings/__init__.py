"""User settings: one schema, persisted as a human-readable file in the config dir."""
