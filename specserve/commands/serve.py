"""`specserve serve`: the OpenAI- and llama-server-compatible HTTP server."""
from __future__ import annotations

import argparse
import logging
import socket
from pathlib import Path

from ..errors import OptionError
from ..llm import BUNDLED_MODEL
from ..options import add_engine_options, add_options, spec_option_values
from ..option import Option
from ..speculative.registry import parse_spec_types
from .generate import engine_from_args, sampling_from_args

log = logging.getLogger("specserve.server")

SERVER_OPTIONS = [
    Option(("--host",), "host", str, "127.0.0.1", "address to listen on"),
    Option(("--port",), "port", int, 8080, "port to listen on"),
    Option(("-a", "--alias"), "alias", str, None, "model name reported by the API (default: the model folder's name)"),
    Option(("--api-key",), "api_key", str, None,
           "require this API key (comma-separated for several) as 'Authorization: Bearer <key>' on every "
           "route but /health", env="LLAMA_API_KEY"),
    Option(("--metrics",), "metrics", bool, False, "enable the Prometheus /metrics endpoint",
           env="LLAMA_ARG_ENDPOINT_METRICS"),
    Option(("-to", "--timeout"), "timeout", float, 600.0,
           "seconds a request may take, waiting for a slot included, before it is aborted (0 = no limit)"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_options(parser, defaults={"parallel": 4})
    add_options(parser, SERVER_OPTIONS, "server")


def settings_from_args(args):
    from ..server.settings import ServerSettings
    model_dir = Path(args.model) if args.model else BUNDLED_MODEL
    keys = [k.strip() for k in (args.api_key or "").split(",") if k.strip()]
    return ServerSettings(
        model_name=args.alias or model_dir.name, model_path=str(model_dir), api_keys=keys, metrics=args.metrics,
        timeout=args.timeout,
        defaults=sampling_from_args(args),
        spec_types=parse_spec_types(args.spec_type), spec_options=spec_option_values(args))


def check_port(host: str, port: int) -> None:
    """Fail before loading anything when the address cannot be listened on (busy port, unknown host)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OptionError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)      # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise OptionError(f"cannot listen on {host}:{port}: {exc.strerror} (is another server running there?)") \
                from None


def load_served(args):
    """(engine, tokenizer, settings) as they are served: the settings report what actually runs."""
    settings = settings_from_args(args)
    engine, tokenizer = engine_from_args(args)
    # what actually runs (--spec-default may have chosen a type)
    settings.spec_types = [p.name for p in engine.driver.proposers]
    if engine.driver.enabled:           # the longest draft that can really run (a drafter may clamp the option)
        settings.spec_options = {**settings.spec_options, "spec_draft_n_max": engine.driver.max_draft()}
    return engine, tokenizer, settings


def run(args) -> int:
    import uvicorn

    from ..server.app import create_app
    check_port(args.host, args.port)
    engine, tokenizer, settings = load_served(args)
    app = create_app(engine, tokenizer, settings)
    log.info("serving %s on http://%s:%d: %d slots, context %d per slot, speculative types: %s%s",
             settings.model_name, args.host, args.port, engine.n_parallel, engine.ctx_size,
             ",".join(settings.spec_types) or "none", ", API key required" if settings.api_keys else "")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_graceful_shutdown=5)
    return 0
