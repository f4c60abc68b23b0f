"""The network round trip the status bar shows, against a running `serve`, over a short
conversation: the app's own session (no window) with the model on the server, silence from
the no-microphone source at a microphone's pace, and one text read in as a span.

    python -m app.bench.rtt_bench http://127.0.0.1:8998 --token SECRET --seconds 20

It prints the median of what the status bar showed (each figure is itself the median of
the last 2 s of frames), its range, the late frames, the frames that came back and those
not sent, and the plain HTTP round trip of Settings → "Test connection" for comparison.
A frame's round trip includes the server's time for the frame (queued and stepped); the
status bar shows it in its parts: the network's own round trip (pings) and the rest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

from app.audio.silent_microphone import SilentMicrophone
from app.conversation.session import ConversationSession, SessionStatus
from app.remote.probe import probe_server
from app.settings.schema import AppSettings, EngineSettings, LlmSettings


class _Listener:
    def __init__(self) -> None:
        self.state = ""
        self.detail = ""
        self.statuses: list[SessionStatus] = []
        self.spans = 0
        self.changed = threading.Event()

    def on_state(self, state: str, detail: str) -> None:
        self.state, self.detail = state, detail
        self.changed.set()

    def on_entry(self, entry) -> None:
        if entry.kind == "span" and entry.final:
            self.spans += 1

    def on_status(self, status: SessionStatus) -> None:
        self.statuses.append(status)


def run(url: str, token: str | None, seconds: float) -> int:
    probe = probe_server(url, token)
    print(f"test connection: {probe.message}")
    listener = _Listener()
    settings = AppSettings(engine=EngineSettings(mode="server", server_url=url,
                                                 server_token=token or ""),
                           llm=LlmSettings(backend="none", stt_model="none"))
    session = ConversationSession(settings, listener, lambda _settings: SilentMicrophone())
    session.start()
    deadline = time.monotonic() + 180.0
    while listener.state not in ("running", "error", "stopped") and (
            time.monotonic() < deadline):
        listener.changed.wait(0.2)
        listener.changed.clear()
    if listener.state != "running":
        session.stop()
        print(f"error: the conversation did not start ({listener.detail})", file=sys.stderr)
        return 1
    session.inject_text("Canberra is the capital of Australia.", "rtt bench")
    time.sleep(seconds)
    session.stop()
    shown = [s.frame_rtt_ms for s in listener.statuses if s.frame_rtt_ms is not None]
    if not shown:
        print("error: no round trip was shown", file=sys.stderr)
        return 1
    last = listener.statuses[-1]
    network = [s.network_rtt_ms for s in listener.statuses if s.network_rtt_ms is not None]
    server = [s.server_ms for s in listener.statuses if s.server_ms is not None]
    print(f"status bar over {seconds:g} s: an audio frame's round trip median "
          f"{statistics.median(shown):.1f} ms (min {min(shown):.1f}, max {max(shown):.1f}, "
          f"{len(shown)} updates), of it the network's own median "
          f"{statistics.median(network) if network else float('nan'):.1f} ms and the "
          f"server's {statistics.median(server) if server else float('nan'):.1f} ms; "
          f"{last.late_frames} late frames; {last.dropped_frames} frames not sent; "
          f"{listener.spans} span(s) landed; audio {last.audio_codec or '?'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.bench.rtt_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8998")
    parser.add_argument("--token", default=None, help="the server's token, if it has one")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    if not 1.0 <= args.seconds <= 3600.0:
        parser.error("--seconds must be from 1 to 3600")
    return run(args.url, args.token, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
