"""The settings dialog, one file per tab (the data it edits lives in app/settings)."""
