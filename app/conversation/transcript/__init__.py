"""The transcript: its entries, the builder that makes them from events, export and saved
conversations."""
