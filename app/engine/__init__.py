"""The one speech engine: the face every caller drives (speech_engine.py), its ONE frame loop
over one conversation's row or many (local_engine.py, on the row host of app/row_host.py),
the column bookkeeping written once (columns.py), the framework seam (lm_runtime.py: torch
and MLX) and the Context Spanning span injector. ARCHITECTURE.md, "The engine", is the map."""
