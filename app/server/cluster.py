"""`python main.py serve --cluster`: engine replicas on Ray Serve, behind one address.

Each replica is a Ray Serve deployment replica that loads the checkpoint once and holds one
conversation at a time, over the same two WebSocket protocols as `serve` (the ASGI
ingress of the replica serves them through connection.py). A replica asks Ray for a GPU or
a fraction of one (`num_gpus`); replicas scale with open conversations between a minimum
and a maximum (Ray Serve's autoscaler). So N GPUs on M machines (`ray start` on each) serve
N conversations.

Why two requests per replica and not one: Ray Serve holds a request that finds every
replica at `max_ongoing_requests` in its own queue, and a WebSocket handshake held there
gets no answer at all (and one beyond `max_queued_requests` an HTTP 500, measured with
Ray 2.53). So a replica takes one conversation plus room for an immediate answer: a
conversation that reaches a replica whose engine is taken gets `busy` (with the scaling
state) and a close with 1013. The request router below sends a new connection to the
least loaded replica of all, so a free replica, when there is one, is always the one found.

Needs the `cluster` extra (`pip install -e ".[cluster]"`): ray[serve] and starlette.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ray import serve
from ray.serve import Application
from ray.serve.config import HTTPOptions, RequestRouterConfig
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from app.conversation.config import ConversationConfig
from app.engine.duplex_engine import EngineOptions
from app.server.auth import presented_token, token_matches
from app.server.codec import Codec
from app.server.config import Limits
from app.server.connection import Connection
from app.server.engine_host import EngineHost
from app.server.metrics import ServerMetrics
from app.server.moshi_codec import EVENTS_QUERY, MoshiCodec
from app.server.reference_codec import ReferenceCodec
from app.server.web_app import RETRY_AFTER_S, health
from app.server.wire_socket import AsgiSocket
from app.wire import events as wire

log = logging.getLogger(__name__)

APP_NAME = "contextspan"
DEPLOYMENT_NAME = "engine"
TRY_AGAIN_LATER = 1013
POLICY_VIOLATION = 1008


@dataclass(frozen=True)
class ClusterSettings:
    model_id: str = "tiny"
    device: str | None = None
    dtype: str | None = None
    folder: Path | None = None  # the checkpoint's folder on every node (default: data dir)
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    conversation: ConversationConfig | None = None
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

    def check(self) -> None:
        self.limits.check()
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
    """One replica: the checkpoint, loaded once, and its one conversation at a time."""

    def __init__(self, settings: ClusterSettings) -> None:
        started = time.monotonic()
        self.settings = settings
        self.host = EngineHost.load(settings.model_id, settings.device, settings.dtype,
                                    settings.folder, settings.engine_options,
                                    settings.conversation)
        self.metrics = ServerMetrics()
        log.info("replica ready: %s on %s in %.1f s", self.host.model_id, self.host.device,
                 time.monotonic() - started)

    def authorized(self, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        if token_matches(presented_token(headers, query), self.settings.token):
            return True
        self.metrics.unauthorized += 1
        return False

    def busy_answer(self) -> wire.Busy:
        most = self.settings.max_replicas
        replicas = getattr(serve.get_replica_context(), "world_size", None) or most
        if replicas < most:
            scaling = (f"all {replicas} replica(s) hold a conversation; the cluster adds "
                       f"replicas up to {most}: try again shortly")
        else:
            scaling = (f"all {most} replica(s) hold a conversation: try again when one "
                       "ends")
        return wire.Busy(scaling, RETRY_AFTER_S)

    async def serve_socket(self, websocket: WebSocket, codec: Codec) -> None:
        if not self.authorized(websocket.headers, websocket.query_params):
            try:  # a 401 where the server can say it, else a refused handshake (403)
                await websocket.send_denial_response(
                    PlainTextResponse("a token is needed", status_code=401))
            except RuntimeError:
                await websocket.close(code=POLICY_VIOLATION)
            return
        socket = AsgiSocket(websocket)
        lease = self.host.try_lease()
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
    await _replica().serve_socket(websocket, MoshiCodec(events))


async def _health(request: Request) -> Response:
    replica = _replica()
    return JSONResponse(health(replica.host, replica.metrics))


async def _metrics(request: Request) -> Response:
    replica = _replica()
    if not replica.authorized(request.headers, request.query_params):
        return PlainTextResponse("a token is needed", status_code=401)
    return PlainTextResponse(replica.metrics.render(replica.host.busy))


# A plain Starlette app (not FastAPI): Serve pickles the ingress app, and its handlers find
# their replica through the replica context at request time. /health and /metrics answer
# for the replica the request reached.
ASGI_APP = Starlette(routes=[WebSocketRoute("/ws", _reference_ws),
                             WebSocketRoute("/api/chat", _moshi_chat),
                             Route("/health", _health), Route("/metrics", _metrics)])


def build_application(settings: ClusterSettings) -> Application:
    """The Serve application: the engine deployment, its resources and its scaling."""
    settings.check()
    options: dict = {
        "name": DEPLOYMENT_NAME,
        # One conversation plus room to answer `busy` at once (see the module's docstring).
        "max_ongoing_requests": 2,
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
            "target_ongoing_requests": settings.target_conversations,
            "upscale_delay_s": 5.0, "downscale_delay_s": 120.0}
    deployment = serve.deployment(serve.ingress(ASGI_APP)(EngineReplica), **options)
    return deployment.bind(settings)


def http_options(settings: ClusterSettings) -> HTTPOptions:
    tls = {}
    if settings.ssl_cert or settings.ssl_key:
        if not (settings.ssl_cert and settings.ssl_key):
            raise ValueError("TLS needs both --ssl-cert and --ssl-key")
        tls = {"ssl_certfile": str(settings.ssl_cert), "ssl_keyfile": str(settings.ssl_key)}
    return HTTPOptions(host=settings.host, port=settings.port, **tls)


def deploy(settings: ClusterSettings) -> None:
    """Start Serve's proxies on the connected Ray cluster and deploy the replicas (blocks
    until every replica has loaded the checkpoint)."""
    serve.start(http_options=http_options(settings))
    serve.run(build_application(settings), name=APP_NAME, route_prefix="/")


def run_cluster(settings: ClusterSettings, address: str | None = None) -> int:
    """Join the Ray cluster at `address` (None: $RAY_ADDRESS, else a local one), deploy, and
    serve until Ctrl+C."""
    import ray

    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        deploy(settings)
        scheme = "https" if settings.ssl_cert else "http"
        print(f"serving {settings.model_id} on {scheme}://{settings.host}:{settings.port} "
              f"with {settings.min_replicas} to {settings.max_replicas} replica(s) "
              "(Ctrl+C stops)", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        serve.shutdown()
        ray.shutdown()
