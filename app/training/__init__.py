"""Fine-tuning a checkpoint on span-injected conversations, in the engine's own layout."""
