"""LLM backends: one small interface (`backend.py`), one file per backend."""
