"""The engine behind a web server: `python main.py serve` (and `serve --cluster` on Ray Serve).

One engine holds one conversation. Two protocols reach it: moshi's `/api/chat` (Opus, for
moshi's own clients and web UI) and the Context Spanning reference's `/ws` (float32 PCM and
JSON events, for our client in `client.py`); both accept spans over the wire.
"""
