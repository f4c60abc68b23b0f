"""The memory and speed plan: what fits on a device and keeps up, before anything loads.

The speech model at each precision, the recogniser and the user's Ollama model against the
device's free memory (memory_plan.py: pure arithmetic; memory_survey.py gathers the facts,
footprint.py counts a checkpoint's shape on torch's `meta` device, device_memory.py asks the
device), which card keeps up (speed_plan.py), and how many conversations a server's slots
hold (slot_capacity.py). It reads the engine, the recogniser and the LLM side; none of them
reads it (the Settings tab, the download dialog, `plan` and "auto" precision do)."""
