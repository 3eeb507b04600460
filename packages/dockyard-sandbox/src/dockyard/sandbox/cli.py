"""``dockyard-sandbox serve``: run the sandbox service.

    dockyard-sandbox serve --host 127.0.0.1 --port 9090 [--token-file F] [--workers N] [--cache-dir D]

Without a token the service refuses to listen on anything but loopback. ``--port 0`` picks a
free port; ``--ready-file`` receives the bound port once the service accepts connections.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from dockyard.sandbox.isolation import IsolationError, resolve
from dockyard.sandbox.lifecycle import WorkDirInUse

log = logging.getLogger("dockyard.sandbox")

KEEP_ALIVE_S = 75  # seconds an idle HTTP connection is kept open


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dockyard-sandbox", description="dockyard's hardened task executor service."
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="Run the HTTP service.")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=9090)
    s.add_argument(
        "--token-file", type=Path, help="File holding the bearer token clients must send."
    )
    s.add_argument(
        "--workers", type=int, default=max(1, (os.cpu_count() or 2)), help="Tasks run at once."
    )
    s.add_argument(
        "--queue-size", type=int, default=256, help="Tasks waiting beyond the workers before 429."
    )
    s.add_argument(
        "--session-long-calls",
        type=int,
        default=None,
        metavar="N",
        help="Threads for long session calls (create, exec, finish; default max(4, 2 x "
        "--workers)); as many more wait up to 10 s, then 429. File calls and delete have "
        "max(4, --workers) threads of their own, tty keys max(2, --workers): a long call of one "
        "session never delays a short one of another.",
    )
    _add_storage_and_trust(s)
    s.add_argument(
        "--max-request-mb",
        type=float,
        default=64.0,
        help="Largest request body accepted (MiB); larger ones get 413 before they are read.",
    )
    s.add_argument(
        "--keep-results",
        type=int,
        default=1000,
        help="Finished results kept for GET /v1/tasks/{id}/result (oldest dropped first).",
    )
    s.add_argument(
        "--keep-results-mb",
        type=float,
        default=256.0,
        help="Total size of the finished results kept (MiB; oldest dropped first).",
    )
    s.add_argument(
        "--result-ttl",
        type=float,
        default=3600.0,
        help="Seconds a finished result stays fetchable.",
    )
    s.add_argument(
        "--drain-timeout", type=float, default=60.0, help="Seconds to finish tasks on shutdown."
    )
    s.add_argument(
        "--isolation",
        choices=["auto", "bwrap", "unshare", "none"],
        default="auto",
        help="auto: bubblewrap, else util-linux unshare with a loud warning; none is refused "
        "without --i-understand-this-is-unsafe (see docs/sandbox.md, Isolation modes).",
    )
    s.add_argument(
        "--i-understand-this-is-unsafe",
        dest="unsafe_ok",
        action="store_true",
        help="Required with --isolation none (tasks run with no namespaces).",
    )
    s.add_argument(
        "--no-zygote",
        dest="zygote",
        action="store_false",
        help="Start a fresh interpreter for every test phase instead of forking the pre-started "
        "runner zygote into the jail (same isolation, slower; see docs/sandbox.md).",
    )
    s.add_argument("--ready-file", type=Path, help="Write the bound port here once serving.")
    s.add_argument(
        "--exit-with-stdin",
        action="store_true",
        help="Drain and exit (as on SIGTERM) when stdin reaches end of file: a launcher passes "
        "a pipe and never writes, so the service goes when the launcher dies, however it dies.",
    )
    s.add_argument("--log-level", default="warning")
    return p


def _add_storage_and_trust(s: argparse.ArgumentParser) -> None:
    """``serve``'s options on where the service keeps things and what clients may reach."""
    s.add_argument("--cache-dir", type=Path, help="Repository cache (default: inside --work-dir).")
    s.add_argument(
        "--env-cache-dir",
        type=Path,
        help="Provisioned environments, kept across restarts (default: inside --work-dir, removed "
        "at shutdown).",
    )
    s.add_argument("--cache-max-gb", type=float, default=20.0)
    s.add_argument(
        "--layer-cache-max-gb",
        type=float,
        default=20.0,
        help="Layered images (base roots + layers, under --env-cache-dir): least recently used "
        "layers are evicted past this size.",
    )
    s.add_argument(
        "--warm-containers",
        type=int,
        default=4,
        help="Container sessions kept started ahead, in all: per kind (an environment and its "
        "limits) as many as were asked for in the last 2 minutes, the most recently asked kinds "
        "first; a session of that kind then takes one instead of starting its container. 0: off.",
    )
    s.add_argument(
        "--work-dir",
        type=Path,
        help="Workspaces and per-task files (default: a temp dir). One live service per work "
        "dir; what a killed one left there is reclaimed at start, and all the service made is "
        "removed at shutdown (a dir that existed before stays in place).",
    )
    s.add_argument(
        "--allow-network", action="store_true", help="Let tasks that ask for it use the network."
    )
    s.add_argument(
        "--registry",
        dest="registries",
        action="append",
        default=[],
        metavar="HOST",
        help="A package registry host (ports 80/443) that provisioning steps may reach, besides "
        "the host's apt mirrors (/etc/apt/sources.list*) and PyPI; repeatable. Provisioning "
        "jails reach nothing else (with --allow-network); a host named here may resolve to a "
        "private address (an internal mirror).",
    )
    s.add_argument(
        "--repo-root",
        dest="repo_roots",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="Directory under which clients may name server repositories (repo.path, a server "
        "path in repo.git); repeatable. None by default: clients send repo.tarball. Only what "
        "every user of the host could read is copied into a task.",
    )
    s.add_argument(
        "--allow-git-scheme",
        dest="git_schemes",
        action="append",
        default=[],
        metavar="SCHEME",
        help="URL scheme repo.git may use (https, http, ssh, git); repeatable. None by default. "
        "Tasks clone as root from wherever such a URL points: allow it only for trusted clients.",
    )


def _server() -> tuple[Any, Any, Any] | None:
    """``(uvicorn, ServiceConfig, create_app)``, imported here (`--help` stays fast); None, with
    the install command printed, where the ``server`` extra is missing: the base install is the
    client and the wire models only."""
    try:
        # lazy: uvicorn is the server extra's; the base install (the client) lacks it
        import uvicorn

        # lazy: the app imports fastapi, the server extra's; the base install lacks it
        from dockyard.sandbox.app import ServiceConfig, create_app
    except ImportError as e:
        print(
            f"dockyard-sandbox: the service needs its server dependencies ({e.name} is missing): "
            'pip install "dockyard-sandbox[server]"',
            file=sys.stderr,
        )
        return None
    return uvicorn, ServiceConfig, create_app


def _isolation(args: argparse.Namespace) -> Any:
    """The isolation ``--isolation`` resolves to (its warning printed in a banner); None, with
    the reason printed, where it cannot be had."""
    try:
        isolation = resolve(args.isolation, args.unsafe_ok)
    except IsolationError as e:
        print(f"dockyard-sandbox: {e}", file=sys.stderr)
        return None
    if isolation.warning:
        banner = "!" * 100
        print(f"{banner}\n{isolation.warning}\n{banner}", file=sys.stderr, flush=True)
    return isolation


def _token(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``(token, problem)``: the bearer token of ``--token-file``, and why the service may not
    start without one (an empty file; a non-loopback address and no token)."""
    token = None
    if args.token_file:
        token = args.token_file.read_text().strip()
        if not token:
            return None, f"--token-file {args.token_file} is empty"
    if token is None and not _is_loopback(args.host):
        return None, (
            f"refusing to listen on {args.host} without a token: pass --token-file "
            "FILE (clients send 'Authorization: Bearer <token>') or bind 127.0.0.1."
        )
    return token, None


def _service_config(
    args: argparse.Namespace, service_config: Any, token: str | None, isolation: Any
) -> Any:
    """The service's ``ServiceConfig`` from the command line (sizes in bytes)."""
    return service_config(
        workers=args.workers,
        queue_size=args.queue_size,
        session_long_calls=args.session_long_calls,
        token=token,
        cache_dir=args.cache_dir,
        env_cache_dir=args.env_cache_dir,
        work_dir=args.work_dir,
        allow_network=args.allow_network,
        registries=args.registries,
        drain_timeout_s=args.drain_timeout,
        cache_max_bytes=int(args.cache_max_gb * (1 << 30)),
        layer_cache_max_bytes=int(args.layer_cache_max_gb * (1 << 30)),
        warm_containers=args.warm_containers,
        isolation=isolation,
        zygote=args.zygote,
        repo_roots=args.repo_roots,
        git_schemes=args.git_schemes,
        max_request_bytes=int(args.max_request_mb * (1 << 20)),
        keep_results=args.keep_results,
        keep_results_bytes=int(args.keep_results_mb * (1 << 20)),
        result_ttl_s=args.result_ttl,
    )


def _trust_problem(args: argparse.Namespace, egress: Any) -> str | None:
    """Why ``--registry`` / ``--repo-root`` cannot be used (None: they can); an egress warning
    is printed on the way."""
    for host in args.registries:
        if egress.normalize_host(host) is None:
            return f"--registry {host!r}: expected a host name"
    if args.allow_network and (warning := egress.unnamed_mirrors_warning(args.registries)):
        print(f"dockyard-sandbox: warning: {warning}", file=sys.stderr)
    for root in args.repo_roots:
        if not root.is_dir():
            return f"--repo-root {root}: no such directory"
    return None


def _run_server(uvicorn: Any, app: Any, args: argparse.Namespace) -> None:
    """Serve ``app`` on ``--host``/``--port`` until stopped; the bound port goes to
    ``--ready-file`` (atomically) once the server accepts."""
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        timeout_graceful_shutdown=int(args.drain_timeout) + 5,
        limit_concurrency=None,
        backlog=2048,
        # Idle keep-alive connections stay open well past clients' pool expiry (httpx: 5 s),
        # so the service never closes one as a client sends on it (uvicorn's default is 5 s).
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)

    if args.ready_file:
        orig_startup = server.startup

        async def startup(sockets: list[socket.socket] | None = None) -> None:
            await orig_startup(sockets=sockets)
            tmp = args.ready_file.with_suffix(".tmp")
            tmp.write_text(str(port))
            tmp.rename(args.ready_file)

        server.startup = startup  # type: ignore[method-assign]
    server.run(sockets=[sock])


def _exit_with_stdin() -> None:
    """A thread that waits for stdin's end of file, then SIGTERMs this process (the graceful
    drain); the launcher's end of the pipe closes when it exits, even by SIGKILL."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(0, 1 << 12):
                pass
        log.warning("the launcher is gone (stdin closed): draining and exiting")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-stdin", daemon=True).start()


def serve(args: argparse.Namespace) -> int:
    """``dockyard-sandbox serve``: check the options, build the service, serve it; 2 (the reason
    printed) where it cannot start."""
    token, problem = _token(args)
    if problem is not None:
        print(f"dockyard-sandbox: {problem}", file=sys.stderr)
        return 2
    server = _server()  # before anything else of the service: the extra may be missing
    if server is None:
        return 2
    uvicorn, ServiceConfig, create_app = server
    # lazy: egress imports cryptography and packaging, the server extra's (checked just above)
    from dockyard.sandbox import egress

    isolation = _isolation(args)
    if isolation is None:
        return 2

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    cfg = _service_config(args, ServiceConfig, token, isolation)
    if (problem := _trust_problem(args, egress)) is not None:
        print(f"dockyard-sandbox: {problem}", file=sys.stderr)
        return 2
    try:
        app = create_app(cfg)
    except (IsolationError, ValueError, WorkDirInUse) as e:
        print(f"dockyard-sandbox: {e}", file=sys.stderr)
        return 2
    if args.exit_with_stdin:
        _exit_with_stdin()
    _run_server(uvicorn, app, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
