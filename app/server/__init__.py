"""The engine behind a web server: `python main.py serve` (and `serve --cluster` on Ray Serve).

One engine of N rows serves N conversations at once (`--slots N`; one by default, taken in
turn), kept running by a supervisor (supervisor.py). Two protocols reach it: moshi's
`/api/chat` (Opus, for moshi's own clients and web UI) and the Context Spanning reference's
`/ws` (float32 PCM or Opus and JSON events, for our client in app/wire/client.py); both
accept spans over the wire.
"""
