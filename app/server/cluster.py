"""`python main.py serve --cluster`: engine replicas on Ray Serve, behind one address.

Each replica is a Ray Serve deployment replica that loads the checkpoint once and holds one
conversation at a time (N with `--slots N`: one engine of N rows, and Serve's limit N + 1),
over the same two WebSocket protocols as `serve` (the ASGI ingress of the replica serves
them through connection.py). A replica asks Ray for a GPU or
a fraction of one (`num_gpus`); replicas scale with open conversations between a minimum
and a maximum (Ray Serve's autoscaler). So N GPUs on M machines (`ray start` on each) serve
N conversations.

Why two requests per replica and not one: Ray Serve holds a request that finds every
replica at `max_ongoing_requests` in its own queue, and a WebSocket handshake held there
gets no answer at all (and one beyond `max_queued_requests` an HTTP 500, measured with
Ray 2.53). So a replica takes one conversation plus room for an immediate answer: a
conversation that reaches a replica whose engine is taken gets `busy` (with the scaling
state): on `/ws` in the socket, closed with 1013, as the reference answers; on `/api/chat`
as `serve` answers it, a 503 before the upgrade (Retry-After, a JSON `busy` body). The
request router below sends a new connection to the least loaded replica of all, so a free
replica, when there is one, is always the one found.

The one public address is not Serve's proxy but `serve`'s own listener (front_door.py: the
header deadline, the connection cap, this computer's rule without a token, the token), which
relays to Serve's proxy on the loopback; the replicas check the same rule and token again, for
whatever reaches that proxy directly. Run it on the head node, where Serve's proxy runs.

Needs the `cluster` extra (`pip install -e ".[cluster]"`): ray[serve] and starlette.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.config import HTTPOptions, RequestRouterConfig
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from app.conversation.config import ConversationConfig
from app.engine.speech_engine import EngineOptions
from app.server.auth import AsgiHeaders, presented_token, token_matches
from app.server.codec import Codec
from app.server.config import Limits, ServerConfig
from app.server.connection import Connection
from app.server.engine_host import EngineHost
from app.server.front_door import FrontDoor, FrontDoorThread
from app.server.local_origin import refusal
from app.server.metrics import ServerMetrics
from app.server.moshi_codec import EVENTS_QUERY, MoshiCodec
from app.server.reference_codec import ReferenceCodec
from app.server.slot_metrics import render_host_slots
from app.server.threads import apply_threads
from app.server.web_app import RETRY_AFTER_S, health, ssl_context
from app.server.wire_socket import AsgiSocket
from app.wire import events as wire

log = logging.getLogger(__name__)

APP_NAME = "contextspan"
DEPLOYMENT_NAME = "engine"
TRY_AGAIN_LATER = 1013
POLICY_VIOLATION = 1008
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ClusterSettings:
    # The speech model (its folder, custom_folder, on every node; default: the data dir)
    # and the LLM side, as `serve` reads them.
    conversation: ConversationConfig = ConversationConfig(model_id="tiny")
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    token: str | None = None
    limits: Limits = field(default_factory=Limits)
    min_replicas: int = 1
    max_replicas: int = 1
    gpus_per_replica: float = 1.0  # 1, or a fraction to share a GPU; 0 on a CPU
    cpus_per_replica: float = 1.0
    # Conversations per replica the autoscaler aims at: below 1 keeps spare replicas warm
    # (a 7B takes minutes to load), e.g. 0.8 starts a fifth replica at four conversations.
    target_conversations: float = 0.8
    host: str = "0.0.0.0"
    port: int = 8998
    ssl_cert: Path | None = None
    ssl_key: Path | None = None
    # Conversations each replica holds at once (`--slots`: the rows of its engine); the
    # autoscaler counts free slots: it aims at target_conversations x slots per replica.
    slots: int = 1
    # `--threads` for each replica's torch (None: threads.py's rule, where Ray's
    # OMP_NUM_THREADS, from the replica's CPUs, decides).
    threads: int | None = None

    def server_config(self) -> ServerConfig:
        """What the front door is told: `serve`'s own settings, for the same guards."""
        return ServerConfig(host=self.host, port=self.port, token=self.token,
                            ssl_cert=self.ssl_cert, ssl_key=self.ssl_key, limits=self.limits)

    def check(self) -> None:
        self.limits.check()
        if self.slots < 1:
            raise ValueError("--slots must be at least 1")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError("replicas: need 1 <= min <= max")
        if not 0 <= self.gpus_per_replica <= 8 or not 0 <= self.cpus_per_replica <= 256:
            raise ValueError("a replica asks for 0 to 8 GPUs and 0 to 256 CPUs")
        if not 0.1 <= self.target_conversations <= 1:
            raise ValueError("the autoscaling target is 0.1 to 1 conversation per replica")


class LeastLoadedFirst(RequestRouter):
    """One rank of all replicas: Serve's router then takes the least loaded one below its
    limit, so a new conversation finds a free engine whenever one exists."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None
                              ) -> list[list[RunningReplica]]:
        return [list(candidate_replicas)]


class EngineReplica:
    """One replica: the checkpoint, loaded once, and its conversations (`slots` at once)."""

    def __init__(self, settings: ClusterSettings) -> None:
        from app.engine.device import choose_device

        started = time.monotonic()
        self.settings = settings
        self.threads = apply_threads(settings.threads,
                                     choose_device(settings.conversation.device).type)
        self.host = EngineHost.load(settings.conversation, settings.engine_options,
                                    slots=settings.slots)
        self.metrics = ServerMetrics()
        log.info("replica ready: %s on %s in %.1f s, %s", self.host.model_id,
                 self.host.device, time.monotonic() - started, self.threads.describe())

    def refused(self, connection: HTTPConnection, token_needed: bool = True
                ) -> tuple[int, str] | None:
        """(403 or 401, why) for a request `serve` would refuse, or None. The header bytes
        are read as `serve` reads them (auth.AsgiHeaders), not as Starlette does."""
        headers = AsgiHeaders(connection.headers.raw)
        why = refusal(headers, self.settings.token, self.settings.host)
        if why is None and (not token_needed or self.authorized(headers,
                                                                connection.query_params)):
            return None
        if why is not None:
            self.metrics.unauthorized += 1
            return 403, why
        return 401, "a token is needed"

    def authorized(self, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        if token_matches(presented_token(headers, query), self.settings.token):
            return True
        self.metrics.unauthorized += 1
        return False

    def busy_answer(self) -> wire.Busy:
        most = self.settings.max_replicas
        replicas = getattr(serve.get_replica_context(), "world_size", None) or most
        if replicas < most:
            scaling = (f"all {replicas} replica(s) hold {self._held()}; the cluster adds "
                       f"replicas up to {most}: try again shortly")
        else:
            scaling = (f"all {most} replica(s) hold {self._held()}: try again when one "
                       "ends")
        return wire.Busy(scaling, RETRY_AFTER_S)

    def _held(self) -> str:
        slots = self.settings.slots
        return "a conversation" if slots == 1 else f"{slots} conversations each"

    async def serve_socket(self, websocket: WebSocket, codec: Codec,
                           busy_before_upgrade: bool = False) -> None:
        """`busy_before_upgrade`: a busy replica refuses the handshake itself (503, Retry-After
        and the JSON `busy` body: `serve`'s answer on `/api/chat`, which moshi's clients
        read), where the server lets it; else (and on `/ws`, as the reference answers) the
        socket opens, says `busy` and closes with 1013."""
        refused = self.refused(websocket)
        if refused is not None:
            status, why = refused
            try:  # the status where the server can say it, else a refused handshake (403)
                await websocket.send_denial_response(PlainTextResponse(why, status_code=status))
            except RuntimeError:
                await websocket.close(code=POLICY_VIOLATION)
            return
        socket = AsgiSocket(websocket)
        lease = self.host.try_lease()
        if lease is None and busy_before_upgrade:
            busy = self.busy_answer()
            with contextlib.suppress(RuntimeError):  # a server without denial responses
                await websocket.send_denial_response(JSONResponse(
                    {"type": wire.Busy.TYPE, "message": busy.message}, status_code=503,
                    headers={"Retry-After": str(RETRY_AFTER_S)}))
                self.metrics.busy += 1
                return
        await websocket.accept()
        if lease is None:
            self.metrics.busy += 1
            for data in codec.event(self.busy_answer()):
                await socket.send(data)
            await socket.close(TRY_AGAIN_LATER, "busy")
            return
        await Connection(socket, codec, lease, self.settings.limits, self.metrics).run()


def _replica() -> EngineReplica:
    return serve.get_replica_context().servable_object


async def _reference_ws(websocket: WebSocket) -> None:
    await _replica().serve_socket(websocket, ReferenceCodec())


async def _moshi_chat(websocket: WebSocket) -> None:
    events = websocket.query_params.get(EVENTS_QUERY[0]) == EVENTS_QUERY[1]
    await _replica().serve_socket(websocket, MoshiCodec(events), busy_before_upgrade=True)


async def _health(request: Request) -> Response:
    replica = _replica()
    refused = replica.refused(request, token_needed=False)  # open to all on this computer
    if refused is not None:
        return PlainTextResponse(refused[1], status_code=refused[0])
    return JSONResponse(health(replica.host, replica.metrics))


async def _metrics(request: Request) -> Response:
    replica = _replica()
    refused = replica.refused(request)
    if refused is not None:
        return PlainTextResponse(refused[1], status_code=refused[0])
    return PlainTextResponse(replica.metrics.render(replica.host.busy)
                             + render_host_slots(replica.host))


# A plain Starlette app (not FastAPI): Serve pickles the ingress app, and its handlers find
# their replica through the replica context at request time. /health and /metrics answer
# for the replica the request reached.
ASGI_APP = Starlette(routes=[WebSocketRoute("/ws", _reference_ws),
                             WebSocketRoute("/api/chat", _moshi_chat),
                             Route("/health", _health), Route("/metrics", _metrics)])


def build_application(settings: ClusterSettings) -> Application:
    """The Serve application: the engine deployment, its resources and its scaling."""
    settings.check()
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        # Its conversations plus room to answer `busy` at once (see the module's docstring).
        "max_ongoing_requests": settings.slots + 1,
        "ray_actor_options": {"num_gpus": settings.gpus_per_replica,
                              "num_cpus": settings.cpus_per_replica},
        # Ray declares the field `str | Callable`, but its pydantic-v1 model reads to the
        # checker as taking a dict.
        "request_router_config": RequestRouterConfig(
            request_router_class=LeastLoadedFirst),  # type: ignore[arg-type]
        "graceful_shutdown_timeout_s": settings.limits.stop_timeout_s,
    }
    if settings.min_replicas == settings.max_replicas:
        options["num_replicas"] = settings.min_replicas
    else:
        options["autoscaling_config"] = {
            "min_replicas": settings.min_replicas, "max_replicas": settings.max_replicas,
            "target_ongoing_requests": settings.target_conversations * settings.slots,
            "upscale_delay_s": 5.0, "downscale_delay_s": 120.0}
    deployment = serve.deployment(serve.ingress(ASGI_APP)(EngineReplica), **options)
    return deployment.bind(settings)


def proxy_options(port: int) -> HTTPOptions:
    """Serve's proxy: on the loopback, behind the front door (which holds the TLS)."""
    return HTTPOptions(host="127.0.0.1", port=port)


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def deploy(settings: ClusterSettings) -> FrontDoorThread:
    """Open the front door at the settings' address (a port in use or a TLS file that does
    not load fails here, before any replica loads), start Serve's proxy behind it, and deploy
    the replicas (blocks until every one has loaded the checkpoint). Stop the door returned
    when done."""
    settings.check()
    ssl_context(settings.server_config())  # the TLS files load, or this says why
    proxy_port = _free_loopback_port()
    door = FrontDoorThread(FrontDoor(f"http://127.0.0.1:{proxy_port}",
                                     settings.server_config()))
    door.start()
    try:
        serve.start(http_options=proxy_options(proxy_port))
        serve.run(build_application(settings), name=APP_NAME, route_prefix="/")
    except BaseException:
        door.stop()
        raise
    return door


def start_ray(address: str | None = None, **options: object) -> object:
    """Join the Ray cluster at `address` (None: $RAY_ADDRESS), or start a local one bound to
    the loopback: a cluster of this one machine has no peer to be reached by, and `serve`
    listens on the loopback unless told otherwise (the front door is the one public address,
    whatever --host is). Returns ray.init's context."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        options.setdefault("_node_ip_address", LOOPBACK)
    return ray.init(address=address, include_dashboard=False, log_to_driver=False, **options)


def run_cluster(settings: ClusterSettings, address: str | None = None) -> int:
    """Join the Ray cluster at `address` (None: $RAY_ADDRESS, else a local one on the
    loopback), deploy, and serve until Ctrl+C."""
    import ray

    start_ray(address)
    door: FrontDoorThread | None = None
    try:
        door = deploy(settings)
        scheme = "https" if settings.ssl_cert else "http"
        print(f"serving {settings.conversation.model_id} on "
              f"{scheme}://{settings.host}:{settings.port} "
              f"with {settings.min_replicas} to {settings.max_replicas} replica(s) "
              "(Ctrl+C stops)", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        if door is not None:
            door.stop()
        serve.shutdown()
        ray.shutdown()
