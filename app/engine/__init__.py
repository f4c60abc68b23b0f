"""The one speech engine: its frame loop over many conversations' rows (local_engine.py), the
column bookkeeping written once (columns.py), the framework seam (lm_runtime.py: torch and
MLX) and the Context Spanning span injector. ARCHITECTURE.md, "The engine", is the map."""
