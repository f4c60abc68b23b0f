"""Fine-tuning a checkpoint on span-injected conversations, in the engine's own layout
(`train`: trainer.py, recipe.py), and the proof on a tiny model that a Moshi-architecture LM
learns to read an injected span (span_proxy.py; on MLX too: span_proxy_mlx.py)."""
