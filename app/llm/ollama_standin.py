"""A scriptable stand-in for an Ollama server, speaking its HTTP wire protocol on 127.0.0.1.

Ollama cannot be installed on the machines that build and test ContextSpan, so the tests and
the pipeline benchmark run the real `ollama` client against this server instead. It follows
Ollama's API as Ollama documents it (docs/api.md in github.com/ollama/ollama): NDJSON
streaming on /api/chat, /api/tags, /api/show, /api/ps, and
`{"error": ...}` bodies for failures. Each /api/chat reply is a `ScriptedReply`: what to say,
which tools to call, how slowly, and which fault to inject. Its reply headers declare
the scripted time (`X-Standin-Declared-Latency`, seconds: the first-token delay plus the
chunk delays), so that a replayed run counts that time and not the busy machine's
(app/orchestrator/replay_clock.py).

It ships in the package (not under tests/) because the product runs it too: `python main.py
--screenshot` (whose answer is this server's scripted text, and says so), the `bench
pipeline` / `bench soak` commands, which must run where no Ollama is installed, and `eval
fdb3 run --llm standin`, whose demo samples carry the tool calls the stand-in makes
(`ToolPlanScript`: a plan of calls, with references to earlier results resolved from what
the client handed back, as a model that uses tools would).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from app.llm.backend import DECLARED_LATENCY_HEADER
from app.llm.result_references import MISSING, parse_result, resolve_arguments

_STOP_JOIN_S = 2.0  # how long stop() waits for each thread before giving up on it


@dataclass
class ScriptedReply:
    """One /api/chat answer, and the fault (if any) to inject into it."""

    content: str = ""  # streamed in chunks of `chunk_chars`
    # [{"name":..., "arguments": {...}}]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    first_token_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    chunk_chars: int = 8
    status: int = 200  # non-2xx -> {"error": error}
    error: str = "boom"
    malformed: bool = False  # send a non-JSON line mid-stream
    stream_error: str | None = None  # an {"error": ...} line inside the stream


_DEFAULT_REPLY = ScriptedReply(content="Hello from the Ollama stand-in.")


@dataclass(frozen=True)
class StandInModel:
    """What the stand-in says of one model, in Ollama's terms: the size of its file
    (/api/tags), its details and model_info (/api/show), and, when it is loaded, what it
    holds in memory and on the GPU (/api/ps `size` and `size_vram`)."""

    file_bytes: int = 1024
    family: str = "standin"
    parameter_size: str = "1M"
    quantization_level: str = "Q4_0"
    model_info: Mapping[str, Any] = field(
        default_factory=lambda: {"general.architecture": "standin"})
    loaded_bytes: int | None = None  # None: not loaded, so absent from /api/ps
    loaded_vram_bytes: int | None = None  # None: all of it on the GPU
    context_length: int = 4096  # the loaded model's context (Ollama's default)


_DEFAULT_MODEL = StandInModel()


class _Server(ThreadingHTTPServer):
    """Keeps its handler threads so that stop() can join them (the stdlib forgets daemons)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, standin: OllamaStandIn) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.standin = standin
        self.handler_threads: list[threading.Thread] = []
        self._threads_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="ollama-standin-request",
            daemon=True,
        )
        with self._threads_lock:
            self.handler_threads = [t for t in self.handler_threads if t.is_alive()]
            self.handler_threads.append(thread)
        thread.start()

    def live_handler_threads(self) -> list[threading.Thread]:
        with self._threads_lock:
            return list(self.handler_threads)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-stream is normal here (cancel, timeouts): stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection; a stream ends when it closes
    timeout = 10.0  # a silent client cannot pin a handler thread forever

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request log lines."""

    # -- routing ---------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._send_json(200, None)

    def do_GET(self) -> None:
        standin = self.server.standin
        if self.path == "/":
            self._send_bytes(200, b"Ollama is running", "text/plain; charset=utf-8")
        elif self.path == "/api/tags":
            entries = [_model_entry(name, standin.facts(name)) for name in standin.models]
            self._send_json(200, {"models": entries})
        elif self.path == "/api/ps":
            self._send_json(200, {"models": [
                _loaded_entry(name, standin.facts(name)) for name in standin.models
                if standin.facts(name).loaded_bytes is not None]})
        elif self.path == "/api/version":
            self._send_json(200, {"version": "0.0.0-standin"})
        else:
            self._send_json(404, {"error": "404 page not found"})

    def do_POST(self) -> None:
        body = self._read_json()
        if body is None:
            self._send_json(400, {"error": "invalid JSON body"})
            return
        if self.path == "/api/chat":
            self._chat(body)
        elif self.path == "/api/show":
            self._show(body)
        else:
            self._send_json(404, {"error": "404 page not found"})

    # -- endpoints -------------------------------------------------------------------------

    def _show(self, body: dict[str, Any]) -> None:
        name = str(body.get("model") or body.get("name") or "")
        standin = self.server.standin
        if not standin.knows(name):
            self._send_json(404, {"error": f"model '{name}' not found"})
            return
        facts = standin.facts(name)
        self._send_json(
            200,
            {
                "modelfile": f"FROM {name}",
                "parameters": "",
                "template": "{{ .Prompt }}",
                "details": _model_entry(name, facts)["details"],
                "model_info": dict(facts.model_info),
                "capabilities": ["completion", "tools"],
            },
        )

    def _chat(self, body: dict[str, Any]) -> None:
        standin = self.server.standin
        standin.record(body)
        model = str(body.get("model") or "")
        if not standin.knows(model):
            self._send_json(404, {"error": f"model '{model}' not found"})
            return
        reply = standin.next_reply(body)
        if not 200 <= reply.status < 300:
            self._send_json(reply.status, {"error": reply.error})
            return
        if not self._wait(reply.first_token_delay_s):
            return
        counters = _counters(body, reply)
        if body.get("stream", True) is False:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                message["tool_calls"] = _wire_tool_calls(reply.tool_calls)
            self._send_json(200, {**_line(model, message, done=True), **counters},
                            declared_s=reply.first_token_delay_s)
            return
        self._stream(model, reply, counters)

    def _stream(self, model: str, reply: ScriptedReply, counters: dict[str, Any]) -> None:
        standin = self.server.standin
        size = max(1, reply.chunk_chars)
        fragments = [reply.content[i : i + size] for i in range(0, len(reply.content), size)]
        lines: list[bytes] = []
        for fragment in fragments:
            lines.append(_ndjson(_line(model, {"role": "assistant", "content": fragment})))
        if reply.tool_calls:
            calls = _wire_tool_calls(reply.tool_calls)
            message = {"role": "assistant", "content": "", "tool_calls": calls}
            lines.append(_ndjson(_line(model, message)))
        fault_at = min(1, len(lines))  # faults come after the first fragment, mid-stream
        if reply.malformed:
            lines.insert(fault_at, b'{"model": "' + model.encode() + b'", "message": {\n')
        if reply.stream_error is not None:
            del lines[fault_at:]
            lines.append(_ndjson({"error": reply.stream_error}))
        else:
            final = _line(model, {"role": "assistant", "content": ""}, done=True)
            lines.append(_ndjson({**final, **counters}))
        declared = reply.first_token_delay_s + reply.chunk_delay_s * (len(lines) - 1)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header(DECLARED_LATENCY_HEADER, f"{declared!r}")
            self.end_headers()
            for index, line in enumerate(lines):
                if index and not self._wait(reply.chunk_delay_s):
                    return
                self.wfile.write(line)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            standin.record_hangup()  # the client hung up (cancel or timeout)
            return

    def _wait(self, seconds: float) -> bool:
        """A scripted delay that stop() interrupts and that ends, recorded in `hangups`, the
        moment the client closes its connection. False: stop sending."""
        standin = self.server.standin
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if not standin.wait(0.0):
                return False
            readable, _, _ = select.select([self.connection], [], [], min(remaining, 0.01))
            if readable:
                if self._client_gone():
                    standin.record_hangup()
                    return False
                if not standin.wait(min(remaining, 0.01)):  # more bytes: not a hang-up
                    return False
        return standin.wait(0.0)

    def _client_gone(self) -> bool:
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:  # reset by the peer
            return True

    # -- helpers ---------------------------------------------------------------------------

    def _read_json(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw)
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _send_json(self, status: int, payload: Any, declared_s: float | None = None) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self._send_bytes(status, data, "application/json; charset=utf-8", declared_s)

    def _send_bytes(self, status: int, data: bytes, content_type: str,
                    declared_s: float | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if declared_s is not None:
                self.send_header(DECLARED_LATENCY_HEADER, f"{declared_s!r}")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            return


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _line(model: str, message: dict[str, Any], *, done: bool = False) -> dict[str, Any]:
    line: dict[str, Any] = {"model": model, "created_at": _now(), "message": message, "done": done}
    if done:
        line["done_reason"] = "stop"
    return line


def _ndjson(obj: Any) -> bytes:
    """One line as Ollama (Go's encoding/json) writes it: non-ASCII text raw, U+0085 among
    it, but U+2028 and U+2029 escaped."""
    text = json.dumps(obj, ensure_ascii=False)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode() + b"\n"


def _wire_tool_calls(calls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ollama's shape; `arguments` is passed through as given, so a test can send a bad one."""
    return [{"function": {"name": c.get("name"), "arguments": c.get("arguments")}} for c in calls]


def _counters(body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
    """Plausible counters: a word count of the prompt, one token per streamed fragment."""
    prompt_tokens = 0
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            prompt_tokens += len(str(message.get("content") or "").split())
    size = max(1, reply.chunk_chars)
    eval_count = -(-len(reply.content) // size) + len(reply.tool_calls)
    return {
        "total_duration": 1_000_000,
        "load_duration": 1_000,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": 100_000,
        "eval_count": eval_count,
        "eval_duration": 500_000,
    }


def _model_entry(name: str, facts: StandInModel = _DEFAULT_MODEL) -> dict[str, Any]:
    return {
        "model": name,
        "name": name,
        "modified_at": "2026-11-29T00:00:00Z",
        "digest": "0" * 64,
        "size": facts.file_bytes,
        "details": {
            "format": "gguf",
            "family": facts.family,
            "parameter_size": facts.parameter_size,
            "quantization_level": facts.quantization_level,
        },
    }


def _loaded_entry(name: str, facts: StandInModel) -> dict[str, Any]:
    """One /api/ps row: Ollama's own shape for a model loaded in memory."""
    entry = _model_entry(name, facts)
    loaded = facts.loaded_bytes or 0
    vram = loaded if facts.loaded_vram_bytes is None else facts.loaded_vram_bytes
    expires = datetime.now(timezone.utc) + timedelta(minutes=5)  # Ollama's keep_alive default
    return {
        "name": name,
        "model": name,
        "size": loaded,
        "digest": entry["digest"],
        "details": entry["details"],
        "expires_at": expires.isoformat().replace("+00:00", "Z"),
        "size_vram": vram,
        "context_length": facts.context_length,
    }


@dataclass(frozen=True)
class PlannedCall:
    name: str
    arguments: Mapping[str, Any]  # a value "$RESULT_n.path" names an earlier call's result


class ToolPlanScript:
    """A stand-in script that uses tools the way a model does, following a plan.

    Each request that ends with the user's words or with tool results gets the plan's next
    step (one round: one or more calls, in Ollama's wire shape), and once the plan is
    through, `answer`. The plan is played once, whatever the turns: a request after it (a
    new turn) gets `after`. An argument written `$RESULT_n.path` is resolved from the
    results the client sent back for the plan's n-th call (app/llm/result_references.py);
    a result that never came back (a cancelled turn) leaves the reference as written."""

    def __init__(self, steps: Sequence[Sequence[PlannedCall]], answer: str,
                 after: str = "") -> None:
        self.steps = [list(step) for step in steps]
        self.answer = answer
        self.after = after
        self.results: list[Any] = []  # each planned call's result, parsed, in call order
        self._next_step = 0
        self._waiting_for = 0  # calls of the last step whose results have not been read
        self._answered = False
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            self._read_results(body.get("messages") or [])
            if self._next_step < len(self.steps):
                step = self.steps[self._next_step]
                self._next_step += 1
                self._waiting_for = len(step)
                return ScriptedReply(tool_calls=[
                    {"name": call.name,
                     "arguments": resolve_arguments(dict(call.arguments), self.results)}
                    for call in step])
            if not self._answered:
                self._answered = True
                return ScriptedReply(content=self.answer)
            return ScriptedReply(content=self.after)

    def _read_results(self, messages: list[dict[str, Any]]) -> None:
        """The trailing tool messages answer the last step's calls, in order."""
        if not self._waiting_for:
            return
        trailing: list[str] = []
        for message in reversed(messages):
            if not isinstance(message, dict) or message.get("role") != "tool":
                break
            trailing.insert(0, str(message.get("content") or ""))
        got = [parse_result(text) for text in trailing[-self._waiting_for:]]
        self.results += got + [MISSING] * (self._waiting_for - len(got))
        self._waiting_for = 0


def _full_name(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


class OllamaStandIn:
    """A local Ollama look-alike in a background thread; use it as a context manager."""

    def __init__(
        self,
        script: Callable[[dict[str, Any]], ScriptedReply] | Sequence[ScriptedReply] = (),
        models: Sequence[str] = ("standin:latest",),
        model_facts: Mapping[str, StandInModel] | None = None,
    ) -> None:
        """`model_facts`: sizes and details by model name (the rest get a 1 kB stand-in)."""
        self._lock = threading.Lock()
        self._script = script
        self._next_index = 0
        self.models = tuple(models)
        self.model_facts = {_full_name(k): v for k, v in (model_facts or {}).items()}
        self.url = ""
        self.requests: list[dict[str, Any]] = []
        self.hangups: list[float] = []  # monotonic times a client closed its connection early
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def script(self) -> Callable[[dict[str, Any]], ScriptedReply] | Sequence[ScriptedReply]:
        return self._script

    @script.setter
    def script(self, script: Callable[[dict[str, Any]], ScriptedReply] | Sequence[ScriptedReply]
               ) -> None:
        """A new script may be set at any time; a sequence then starts from its first reply."""
        with self._lock:
            self._script = script
            self._next_index = 0

    # -- used by the request handlers -------------------------------------------------------

    def record(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(body)

    def record_hangup(self) -> None:
        with self._lock:
            self.hangups.append(time.monotonic())

    def knows(self, model: str) -> bool:
        return _full_name(model) in {_full_name(m) for m in self.models}

    def facts(self, model: str) -> StandInModel:
        return self.model_facts.get(_full_name(model), _DEFAULT_MODEL)

    def next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        with self._lock:
            script = self._script
            if not callable(script):
                if not script:
                    return _DEFAULT_REPLY
                index = min(self._next_index, len(script) - 1)
                self._next_index += 1
                return script[index]
        return script(body)  # outside the lock: a slow script must not block other requests

    def wait(self, seconds: float) -> bool:
        """Sleep that stop() interrupts; False means the stand-in is stopping."""
        if seconds <= 0:
            return not self._stopping.is_set()
        return not self._stopping.wait(seconds)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> OllamaStandIn:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(self)
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # shutdown() waits up to one poll interval
            name="ollama-standin",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()  # ends the scripted delays of in-flight replies
        server.shutdown()
        server.server_close()
        deadline = time.monotonic() + _STOP_JOIN_S
        for worker in [thread, *server.live_handler_threads()]:
            if worker is not None:
                worker.join(timeout=max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    def __enter__(self) -> OllamaStandIn:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
