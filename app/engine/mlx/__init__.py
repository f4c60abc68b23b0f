"""The speech model's LM on MLX: Apple Silicon's path (and any machine where `mlx` imports).

The torch engine's semantics, column for column, on `mlx.core`/`mlx.nn`:
- lm.py: the temporal transformer (one or many positions per call, causal within the call,
  a KV ring that rotates at the context) and the depformer;
- kv_ring.py: that ring, with the torch ring's positions and mask;
- weights.py: the same checkpoint files the torch loader reads, converted strictly;
- lm_gen.py: vanilla Moshi's generator (moshi's LMGen) and its span positions;
- forcing_generator.py: PersonaPlex's and Context Spanning's generator (forced rows, the
  16-codebook depformer, the conversation start, span blocks).
Mimi, the tokenizer and the app's wiring stay where they are: this package is the LM core.
"""
