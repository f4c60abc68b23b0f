"""LLM backends: one small interface (`backend.py`), one file per backend with its memory
footprint beside it, the one place a backend is built (`factory.py`, from the rows of
app/llm_backends.py), and the stand-in Ollama server the tests talk to
(`ollama_standin.py`)."""
