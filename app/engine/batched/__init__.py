"""Many conversations in one engine: B slots share one batched forward per frame."""
