"""The orchestrator: from what the user said to spans in the speech model's context."""
