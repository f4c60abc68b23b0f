"""`python main.py serve`: the command line of the server (and of `serve --cluster`).

Light to import (app/cli/main.py builds every parser at start): the server itself is
imported only when the command runs. `python -m app.server.cli ...` runs it on its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from app.command_options import add_options, cli_option, from_args  # light
from app.conversation.options import (  # light
    LLM_SIDE,
    SERVE,
    SPEECH,
    add_conversation_options,
)
from app.server.threads import parse_threads  # light: torch only when threads are set

if TYPE_CHECKING:  # the server's own modules load only when the command runs (see above)
    from app.conversation.config import ConversationConfig
    from app.engine.speech_engine import EngineOptions
    from app.server.config import Limits

TOKEN_ENV = "CONTEXTSPAN_SERVER_TOKEN"
HEARTBEAT_S = 10.0  # Limits.heartbeat_s (app/server/config.py, which loads numpy)


# The parser class the caller's subparsers make (app/cli/main.py: its one-line-error parser).
_Parser = TypeVar("_Parser", bound=argparse.ArgumentParser)
MODEL, NETWORK, CLUSTER = "model", "network", "cluster"  # the parts of serve's --help


@dataclass(frozen=True)
class ServeOptions:
    """What `serve` is asked beside its conversation (ConversationConfig's options): the
    engine's knobs, the network's limits, a cluster. Each field declares its flag (app/
    command_options.py); app/server/config.py's Limits and ServerConfig are made of them."""

    # The model.
    seed: int | None = field(default=None, metadata=cli_option("--seed", section=MODEL))
    chunk_limit: int | None = field(default=None, metadata=cli_option(
        "--chunk-limit", section=MODEL, help="most span positions per frame (default: "
                                             "measured by the engine when the server starts)"))
    slots: int = field(default=1, metadata=cli_option(
        "--slots", section=MODEL, metavar="N",
        help="conversations at once: the engine's rows (one batched forward per frame); past "
             "N a client is answered busy (default 1)"))
    threads: str = field(default="auto", metadata=cli_option(  # app/server/threads.py reads it
        "--threads", section=MODEL, metavar="N",
        help="torch's CPU threads for the process (default auto: $OMP_NUM_THREADS if set, "
             "else 1 with the model on a GPU, half the usable cores up to 8 on a CPU; "
             "app/server/threads.py says why); the start line says the number"))
    ret_at: tuple[float, ...] = field(default=(), metadata=cli_option(
        "--ret-at", section=MODEL, kind="list", metavar="SECONDS",
        help="force the model's <ret> this long into every conversation (repeatable; models "
             "that ask with <ret>, e.g. tiny-cs): a model with random weights never asks on "
             "its own"))
    # The network.
    host: str = field(default="127.0.0.1", metadata=cli_option(
        "--host", section=NETWORK,
        help="address to listen on (0.0.0.0: every interface; needs --token)"))
    port: int = field(default=8998, metadata=cli_option(
        "--port", section=NETWORK, help="port (default 8998, moshi's; 0: any free port)"))
    # Read when the parser is built: the environment keeps the token out of `ps`.
    token: str | None = field(default_factory=lambda: os.environ.get(TOKEN_ENV),
                              metadata=cli_option(
        "--token", section=NETWORK,
        help=f"shared secret clients send as ?token= or 'Authorization: Bearer' (default "
             f"${TOKEN_ENV}; the environment keeps it out of `ps`)"))
    allow_anonymous: bool = field(default=False, metadata=cli_option(
        "--allow-anonymous", section=NETWORK,
        help="serve without a token on an address other than the loopback"))
    ssl_cert: Path | None = field(default=None, metadata=cli_option(
        "--ssl-cert", section=NETWORK, help="TLS certificate (PEM)"))
    ssl_key: Path | None = field(default=None, metadata=cli_option(
        "--ssl-key", section=NETWORK, help="TLS private key (PEM)"))
    idle_timeout_s: float = field(default=60.0, metadata=cli_option(
        "--idle-timeout", section=NETWORK, metavar="SECONDS",
        help="close a connection that sent nothing for this long (default 60)"))
    max_conversation_s: float = field(default=3600.0, metadata=cli_option(
        "--max-conversation", section=NETWORK, metavar="SECONDS",
        help="longest a connection may hold the engine (default 3600)"))
    max_message_bytes: int = field(default=64 * 1024, metadata=cli_option(
        "--max-message-bytes", section=NETWORK,
        help="larger client messages are refused with an error event"))
    heartbeat_s: float = field(default=HEARTBEAT_S, metadata=cli_option(
        "--heartbeat", section=NETWORK, metavar="SECONDS",
        help="ping a client silent this long; one that does not answer within half of it has "
             "vanished and frees the engine; a network stall shorter than 1.5 times it keeps "
             f"the conversation (default {HEARTBEAT_S:g})"))
    # A cluster.
    cluster: bool = field(default=False, metadata=cli_option(
        "--cluster", section=CLUSTER, help="deploy engine replicas on a Ray cluster instead"))
    ray_address: str | None = field(default=None, metadata=cli_option(
        "--ray-address", section=CLUSTER,
        help="the cluster to join (default $RAY_ADDRESS, else a local one)"))
    min_replicas: int = field(default=1, metadata=cli_option("--min-replicas", section=CLUSTER))
    max_replicas: int = field(default=1, metadata=cli_option("--max-replicas", section=CLUSTER))
    gpus_per_replica: float | None = field(default=None, metadata=cli_option(  # None: by device
        "--gpus-per-replica", section=CLUSTER,
        help="GPUs each replica asks for: 1, or a fraction to share one (default 1, or 0 with "
             "--device cpu)"))
    cpus_per_replica: float = field(default=1.0, metadata=cli_option(
        "--cpus-per-replica", section=CLUSTER))
    target_conversations: float = field(default=0.8, metadata=cli_option(
        "--target-conversations", section=CLUSTER,
        help="conversations per replica the autoscaler aims at (below 1 keeps spare replicas "
             "loaded; default 0.8)"))


def add_serve_parser(subparsers: argparse._SubParsersAction[_Parser]) -> _Parser:
    serve = subparsers.add_parser(
        "serve", help="serve the engine over the network: moshi's /api/chat and the Context "
                      "Spanning reference's /ws (python main.py serve --help)",
        description="One engine, one conversation at a time, behind an asyncio web server: "
                    "moshi's protocol on /api/chat (moshi's own client and web UI talk to "
                    "it), the reference's on /ws (the app's client), spans over the wire on "
                    "both; /health and /metrics. --cluster deploys replicas on Ray Serve.")
    model = serve.add_argument_group("the model")
    add_conversation_options(model, SERVE, SPEECH, notes={
        "voice": "the default voice (clients may send their own)",
        "role": "the default persona (clients may send their own)"})
    add_options(model, ServeOptions, section=MODEL)
    add_options(serve.add_argument_group("the network"), ServeOptions, section=NETWORK)
    add_conversation_options(serve.add_argument_group("the LLM side on the server (optional)"),
                             SERVE, LLM_SIDE)
    add_options(serve.add_argument_group("a cluster (Ray Serve; pip install -e '.[cluster]')"),
                ServeOptions, section=CLUSTER)
    return serve


def _check_exposure(serve: ServeOptions) -> None:
    from app.server.config import LOOPBACK_HOSTS

    if serve.token or serve.allow_anonymous or serve.host in LOOPBACK_HOSTS:
        return
    raise ValueError(f"--host {serve.host} opens the engine to the network: give --token (or "
                     f"${TOKEN_ENV}), or --allow-anonymous if a proxy in front checks users")


def _check_tls(serve: ServeOptions) -> None:
    """Load the certificate and key as the server will, so a wrong path or a key that does
    not match says so at once."""
    import ssl

    from app.server.config import ServerConfig
    from app.server.web_app import ssl_context

    try:
        ssl_context(ServerConfig(ssl_cert=serve.ssl_cert, ssl_key=serve.ssl_key))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS: cannot use --ssl-cert {serve.ssl_cert} with --ssl-key "
                         f"{serve.ssl_key}: {getattr(exc, 'strerror', None) or exc}") from None


def run_serve(args: argparse.Namespace) -> int:
    from app.conversation.assembly import engine_options
    from app.conversation.options import conversation_from_args
    from app.server.config import Limits

    serve = from_args(ServeOptions, args)
    _check_exposure(serve)
    if serve.chunk_limit is not None and serve.chunk_limit < 1:
        raise ValueError("--chunk-limit must be at least 1")
    if serve.slots < 1:
        raise ValueError("--slots must be at least 1")
    threads = parse_threads(serve.threads)
    limits = Limits(idle_timeout_s=serve.idle_timeout_s,
                    max_conversation_s=serve.max_conversation_s,
                    max_message_bytes=serve.max_message_bytes, heartbeat_s=serve.heartbeat_s)
    limits.check()
    conversation = conversation_from_args(args)
    options = engine_options(conversation, seed=serve.seed, chunk_limit=serve.chunk_limit,
                             forced_ret_frames=_forced_ret_frames(serve.ret_at,
                                                                  conversation.model_id))
    _check_tls(serve)  # before the model loads: minutes for a 7B
    if serve.cluster:
        return _run_cluster(serve, conversation.device, options, conversation, limits, threads)
    import asyncio

    from app.engine.device import choose_device
    from app.server.config import ServerConfig
    from app.server.engine_host import EngineHost
    from app.server.threads import apply_threads
    from app.server.web_app import EngineServer

    config = ServerConfig(serve.host, serve.port, serve.token or None, serve.ssl_cert,
                          serve.ssl_key, limits)
    # Before the model loads: a batched engine measures its frame budget as it warms up.
    thread_choice = apply_threads(threads, choose_device(args.device).type)
    print(f"loading {args.model}…", file=sys.stderr, flush=True)
    host = EngineHost.load(conversation, options, slots=serve.slots)
    server = EngineServer(host, config)
    slots = f", {host.slots} conversations at once" if host.slots > 1 else ""

    def announce(url: str) -> None:
        print(f"serving {host.model_id} ({host.device}) on {url}: moshi's protocol on "
              f"/api/chat, the reference's on /ws{slots}; {thread_choice.describe()} "
              "(Ctrl+C stops)", file=sys.stderr, flush=True)

    try:
        asyncio.run(server.serve_until_signalled(announce))
    finally:
        host.close()  # the batched engine's thread, when --slots > 1
    if host.fatal is not None:  # a supervisor (systemd, Docker) starts a fresh process
        print(f"serve stopped: {host.fatal}", file=sys.stderr, flush=True)
        return 1
    return 0


def _forced_ret_frames(ret_at: tuple[float, ...], model_id: str) -> frozenset[int]:
    """`--ret-at`: the frames whose text is forced to <ret>, checked against the model."""
    if not ret_at:
        return frozenset()
    from app.checkpoints.catalog import get_manifest
    from app.frames import FRAME_RATE

    if any(not 0 <= seconds < float("inf") for seconds in ret_at):
        raise ValueError("--ret-at takes seconds from 0 on")
    manifest = get_manifest(model_id)
    if manifest.retrieval.trigger != "ret_token" or manifest.generator != "forcing":
        raise ValueError(f"--ret-at: {model_id} does not ask with <ret>, nothing to force "
                         "(tiny-cs and context-spanning-7b do)")
    return frozenset(int(seconds * FRAME_RATE) for seconds in ret_at)


def _run_cluster(serve: ServeOptions, device: str, options: EngineOptions,
                 conversation: ConversationConfig, limits: Limits,
                 threads: int | None) -> int:
    try:
        from app.server.cluster import ClusterSettings, run_cluster
    except ImportError as exc:
        raise RuntimeError(f"serve --cluster needs Ray Serve ({exc.name} is missing): "
                           "pip install -e '.[cluster]'") from None
    gpus = serve.gpus_per_replica
    if gpus is None:
        gpus = 0.0 if device == "cpu" else 1.0
    settings = ClusterSettings(
        conversation=conversation, engine_options=options, token=serve.token or None,
        limits=limits, min_replicas=serve.min_replicas, max_replicas=serve.max_replicas,
        gpus_per_replica=gpus, cpus_per_replica=serve.cpus_per_replica,
        target_conversations=serve.target_conversations, host=serve.host, port=serve.port,
        slots=serve.slots, threads=threads,
        ssl_cert=serve.ssl_cert, ssl_key=serve.ssl_key)
    settings.check()
    return run_cluster(settings, serve.ray_address)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.server.cli")
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run_serve(args)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
