"""`specserve serve-ray`: `specserve serve` replicated behind Ray Serve's HTTP proxy.

Needs the optional extra: pip install 'specserve[ray]'. Every `serve` option applies to each
replica; the replicas, routing and metrics are described in specserve/server/ray_serve.py.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import time

from ..errors import OptionError
from ..option import Option
from ..options import add_options
from . import serve

log = logging.getLogger("specserve.server")

RAY_OPTIONS = [
    Option(("--replicas",), "replicas", int, 2, "engine replicas (each with its own -np slots and spec settings)"),
    Option(("--session-header",), "session_header", str, "X-Session-ID",
           "HTTP header whose value pins a session's requests to one replica (keeps its n-gram state useful)"),
    Option(("--ray-address",), "ray_address", str, None,
           "Ray cluster to join ('auto' = the one running on this machine; default: start a local one)"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    serve.add_arguments(parser)
    add_options(parser, RAY_OPTIONS, "Ray Serve")


def run(args) -> int:
    try:
        import ray
        from ray import serve as ray_serve
    except ImportError:
        raise OptionError("serve-ray needs Ray Serve, an optional extra: pip install 'specserve[ray]'") from None
    from ..server.ray_serve import deployment
    if args.replicas < 1:
        raise OptionError(f"--replicas must be at least 1, got {args.replicas}")
    serve.check_port(args.host, args.port)
    settings = serve.settings_from_args(args)          # option errors before any replica starts
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))     # stop the replicas (and a local cluster) too
    ray.init(address=args.ray_address, log_to_driver=False)
    try:
        ray_serve.start(http_options={"host": args.host, "port": args.port})
        ray_serve.run(deployment(args, args.replicas, args.session_header), name="specserve", route_prefix="/")
        log.info("serving %s on http://%s:%d: %d replicas behind Ray Serve, %d slots each, speculative types: %s",
                 settings.model_name, args.host, args.port, args.replicas, args.parallel,
                 ",".join(settings.spec_types) or "none")
        while True:
            time.sleep(1)
    except RuntimeError as exc:               # a replica that cannot start: Ray Serve gives up on the app
        raise OptionError(f"the replicas did not start: {_replica_error(ray_serve) or exc}") from None
    finally:
        ray_serve.shutdown()
        ray.shutdown()


def _replica_error(ray_serve) -> str | None:
    """The last line of the replicas' start-up error (the exception that names the problem)."""
    try:
        app = ray_serve.status().applications["specserve"]
        message = app.deployments["specserve"].message or app.message
    except Exception:                           # no status to read: keep Ray Serve's own error
        return None
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else None
