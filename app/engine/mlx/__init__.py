"""The speech model's LM on MLX: Apple Silicon's path (and any machine where `mlx` imports).

The framework seam of app/engine/lm_runtime.py on `mlx.core`/`mlx.nn`; the frame loop and
the column bookkeeping are the engine's own (local_engine.py, columns.py):
- lm.py: the temporal transformer (one or many positions per call, causal within the call,
  a KV ring that rotates at the context) and the depformer;
- kv_ring.py: that ring, with the torch ring's positions and mask;
- weights.py: the same checkpoint files the torch loader reads, converted strictly;
- mlx_runtime.py: the seam (a frame's forward and sampling, a read of many positions) and
  the frame codec's face (frame_codec.py: Mimi on MLX or torch's).
"""
