"""`python main.py serve`: the command line of the server (and of `serve --cluster`).

Light to import (app/cli/main.py builds every parser at start): the server itself is
imported only when the command runs. `python -m app.server.cli ...` runs it on its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

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
    model.add_argument("--seed", type=int, default=None)
    model.add_argument("--chunk-limit", type=int, default=None,
                       help="most span positions per frame (default: measured by the "
                            "engine when the server starts)")
    model.add_argument("--slots", type=int, default=1, metavar="N",
                       help="conversations at once: the engine's rows (one batched "
                            "forward per frame); past N a client is answered busy "
                            "(default 1)")
    model.add_argument("--threads", default="auto", metavar="N",
                       help="torch's CPU threads for the process (default auto: "
                            "$OMP_NUM_THREADS if set, else 1 with the model on a GPU, half "
                            "the usable cores up to 8 on a CPU; app/server/threads.py says "
                            "why); the start line says the number")
    model.add_argument("--ret-at", action="append", default=[], type=float,
                       metavar="SECONDS",
                       help="force the model's <ret> this long into every conversation "
                            "(repeatable; models that ask with <ret>, e.g. tiny-cs): a model "
                            "with random weights never asks on its own")

    net = serve.add_argument_group("the network")
    net.add_argument("--host", default="127.0.0.1",
                     help="address to listen on (0.0.0.0: every interface; needs --token)")
    net.add_argument("--port", type=int, default=8998,
                     help="port (default 8998, moshi's; 0: any free port)")
    net.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                     help=f"shared secret clients send as ?token= or 'Authorization: Bearer' "
                          f"(default ${TOKEN_ENV}; the environment keeps it out of `ps`)")
    net.add_argument("--allow-anonymous", action="store_true",
                     help="serve without a token on an address other than the loopback")
    net.add_argument("--ssl-cert", type=Path, default=None, help="TLS certificate (PEM)")
    net.add_argument("--ssl-key", type=Path, default=None, help="TLS private key (PEM)")
    net.add_argument("--idle-timeout", type=float, default=60.0, metavar="SECONDS",
                     help="close a connection that sent nothing for this long (default 60)")
    net.add_argument("--max-conversation", type=float, default=3600.0, metavar="SECONDS",
                     help="longest a connection may hold the engine (default 3600)")
    net.add_argument("--max-message-bytes", type=int, default=64 * 1024,
                     help="larger client messages are refused with an error event")
    net.add_argument("--heartbeat", type=float, default=HEARTBEAT_S, metavar="SECONDS",
                     help="ping a client silent this long; one that does not answer within "
                          "half of it has vanished and frees the engine; a network stall "
                          f"shorter than 1.5 times it keeps the conversation (default "
                          f"{HEARTBEAT_S:g})")

    add_conversation_options(serve.add_argument_group("the LLM side on the server (optional)"),
                             SERVE, LLM_SIDE)

    cluster = serve.add_argument_group("a cluster (Ray Serve; pip install -e '.[cluster]')")
    cluster.add_argument("--cluster", action="store_true",
                         help="deploy engine replicas on a Ray cluster instead")
    cluster.add_argument("--ray-address", default=None,
                         help="the cluster to join (default $RAY_ADDRESS, else a local one)")
    cluster.add_argument("--min-replicas", type=int, default=1)
    cluster.add_argument("--max-replicas", type=int, default=1)
    cluster.add_argument("--gpus-per-replica", type=float, default=None,
                         help="GPUs each replica asks for: 1, or a fraction to share one "
                              "(default 1, or 0 with --device cpu)")
    cluster.add_argument("--cpus-per-replica", type=float, default=1.0)
    cluster.add_argument("--target-conversations", type=float, default=0.8,
                         help="conversations per replica the autoscaler aims at (below 1 "
                              "keeps spare replicas loaded; default 0.8)")
    return serve


def _check_exposure(args: argparse.Namespace) -> None:
    from app.server.config import LOOPBACK_HOSTS

    if args.token or args.allow_anonymous or args.host in LOOPBACK_HOSTS:
        return
    raise ValueError(f"--host {args.host} opens the engine to the network: give --token (or "
                     f"${TOKEN_ENV}), or --allow-anonymous if a proxy in front checks users")


def _check_tls(args: argparse.Namespace) -> None:
    """Load the certificate and key as the server will, so a wrong path or a key that does
    not match says so at once."""
    import ssl

    from app.server.config import ServerConfig
    from app.server.web_app import ssl_context

    try:
        ssl_context(ServerConfig(ssl_cert=args.ssl_cert, ssl_key=args.ssl_key))
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS: cannot use --ssl-cert {args.ssl_cert} with --ssl-key "
                         f"{args.ssl_key}: {getattr(exc, 'strerror', None) or exc}") from None


def run_serve(args: argparse.Namespace) -> int:
    from app.conversation.assembly import engine_options
    from app.conversation.options import conversation_from_args
    from app.server.config import Limits

    _check_exposure(args)
    if args.chunk_limit is not None and args.chunk_limit < 1:
        raise ValueError("--chunk-limit must be at least 1")
    if args.slots < 1:
        raise ValueError("--slots must be at least 1")
    threads = parse_threads(args.threads)
    limits = Limits(idle_timeout_s=args.idle_timeout, max_conversation_s=args.max_conversation,
                    max_message_bytes=args.max_message_bytes, heartbeat_s=args.heartbeat)
    limits.check()
    conversation = conversation_from_args(args)
    options = engine_options(conversation, seed=args.seed, chunk_limit=args.chunk_limit,
                             forced_ret_frames=_forced_ret_frames(args))
    _check_tls(args)  # before the model loads: minutes for a 7B
    if args.cluster:
        return _run_cluster(args, options, conversation, limits, threads)
    import asyncio

    from app.engine.device import choose_device
    from app.server.config import ServerConfig
    from app.server.engine_host import EngineHost
    from app.server.threads import apply_threads
    from app.server.web_app import EngineServer

    config = ServerConfig(args.host, args.port, args.token or None, args.ssl_cert, args.ssl_key,
                          limits)
    # Before the model loads: a batched engine measures its frame budget as it warms up.
    thread_choice = apply_threads(threads, choose_device(args.device).type)
    print(f"loading {args.model}…", file=sys.stderr, flush=True)
    host = EngineHost.load(conversation, options, slots=args.slots)
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


def _forced_ret_frames(args: argparse.Namespace) -> frozenset[int]:
    """`--ret-at`: the frames whose text is forced to <ret>, checked against the model."""
    if not args.ret_at:
        return frozenset()
    from app.checkpoints.catalog import get_manifest
    from app.frames import FRAME_RATE

    if any(not 0 <= seconds < float("inf") for seconds in args.ret_at):
        raise ValueError("--ret-at takes seconds from 0 on")
    manifest = get_manifest(args.model)
    if manifest.retrieval.trigger != "ret_token" or manifest.generator != "forcing":
        raise ValueError(f"--ret-at: {args.model} does not ask with <ret>, nothing to force "
                         "(tiny-cs and context-spanning-7b do)")
    return frozenset(int(seconds * FRAME_RATE) for seconds in args.ret_at)


def _run_cluster(args: argparse.Namespace, options: EngineOptions,
                 conversation: ConversationConfig, limits: Limits,
                 threads: int | None) -> int:
    try:
        from app.server.cluster import ClusterSettings, run_cluster
    except ImportError as exc:
        raise RuntimeError(f"serve --cluster needs Ray Serve ({exc.name} is missing): "
                           "pip install -e '.[cluster]'") from None
    gpus = args.gpus_per_replica
    if gpus is None:
        gpus = 0.0 if args.device == "cpu" else 1.0
    settings = ClusterSettings(
        conversation=conversation, engine_options=options, token=args.token or None,
        limits=limits, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
        gpus_per_replica=gpus, cpus_per_replica=args.cpus_per_replica,
        target_conversations=args.target_conversations, host=args.host, port=args.port,
        slots=args.slots, threads=threads,
        ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    settings.check()
    return run_cluster(settings, args.ray_address)


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
