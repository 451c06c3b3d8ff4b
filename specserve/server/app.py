"""HTTP routes: the OpenAI API (/v1/...), llama-server's native routes, health and metrics.

Handlers only validate, queue and stream; the model runs on the engine loop's thread.
Every error is OpenAI-shaped JSON with the right status; nothing a client sends can stop
the server or disturb other requests.
"""
from __future__ import annotations

import hmac
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..engine.engine import Engine
from ..errors import ContextOverflowError, InvalidRequestError
from ..models.tokenizer import Tokenizer
from . import llama_api
from .body import parse_json_object
from .errors import ApiError, error_body
from .generation import Generation
from .metrics import CONTENT_TYPE
from .openai_schema import check_room, parse_chat, parse_completion
from .settings import ServerSettings

log = logging.getLogger("specserve.server")

PUBLIC_PATHS = frozenset({"/health", "/v1/health"})


class ApiKeyMiddleware:
    """Bearer (or X-Api-Key) authentication on every route but /health."""

    def __init__(self, app, keys: list[str]):
        self.app = app
        self.keys = [k.encode() for k in keys]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.keys or scope["path"] in PUBLIC_PATHS \
                or scope["method"] == "OPTIONS":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"")
        if auth[:7].lower() == b"bearer ":
            given = auth[7:].strip()
        else:
            given = headers.get(b"x-api-key", b"").strip()
        if not any(hmac.compare_digest(given, key) for key in self.keys):
            message = ("Invalid API Key" if given else
                       "Missing API key: send it as 'Authorization: Bearer <key>'")
            response = JSONResponse(error_body(401, message, code="invalid_api_key"), status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def create_app(engine: Engine, tokenizer: Tokenizer | None, settings: ServerSettings) -> FastAPI:
    generation = Generation(engine, tokenizer, settings)
    started = int(time.time())
    n_params = sum(p.numel() for p in engine.target.parameters())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        generation.service.start()
        yield
        generation.service.stop()

    app = FastAPI(title="specserve", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.generation = generation
    app.add_middleware(ApiKeyMiddleware, keys=settings.api_keys)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])

    # ------------------------------------------------------------ errors
    @app.exception_handler(ApiError)
    async def api_error(_, exc: ApiError):
        return exc.response()

    @app.exception_handler(ContextOverflowError)
    async def context_overflow(_, exc: ContextOverflowError):
        return JSONResponse(error_body(400, str(exc), code="context_length_exceeded"), status_code=400)

    @app.exception_handler(InvalidRequestError)
    async def invalid_request(_, exc: InvalidRequestError):
        return JSONResponse(error_body(400, str(exc), code="invalid_value"), status_code=400)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_, exc: RequestValidationError):
        return JSONResponse(error_body(400, f"invalid request: {exc.errors()[0].get('msg')}"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message, code = (exc.detail if isinstance(exc.detail, str) else "error"), None
        if exc.status_code == 404:
            message, code = f"no route {request.method} {request.url.path}", "not_found"
        elif exc.status_code == 405:
            message, code = f"method {request.method} is not allowed on {request.url.path}", "method_not_allowed"
        return JSONResponse(error_body(exc.status_code, message, code=code),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(_, exc: Exception):
        log.exception("unhandled error in a request handler")
        return JSONResponse(error_body(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error"),
                            status_code=500)

    async def json_body(request: Request) -> dict:
        return parse_json_object(await request.body())

    def respond(result):
        if isinstance(result, dict):
            return JSONResponse(result)
        return StreamingResponse(result, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # ------------------------------------------------------------ OpenAI
    @app.post("/v1/chat/completions")
    @app.post("/chat/completions", include_in_schema=False)
    async def chat_completions(request: Request):
        job = parse_chat(await json_body(request), tokenizer, settings.defaults)
        check_room(job, engine.ctx_size)
        return respond(await generation.openai(request, job, chat=True))

    @app.post("/v1/completions")
    @app.post("/completions", include_in_schema=False)
    async def completions(request: Request):
        job = parse_completion(await json_body(request), tokenizer, settings.defaults)
        check_room(job, engine.ctx_size)
        return respond(await generation.openai(request, job, chat=False))

    @app.get("/v1/models")
    @app.get("/models", include_in_schema=False)
    async def models():
        cfg = engine.target.config
        return {"object": "list", "data": [{
            "id": settings.model_name, "object": "model", "created": started, "owned_by": "specserve",
            "root": settings.model_path, "max_model_len": engine.ctx_size,
            "meta": {"n_vocab": cfg.vocab_size, "n_ctx_train": cfg.max_position_embeddings,
                     "n_embd": cfg.hidden_size, "n_params": n_params,
                     "speculative_types": settings.spec_types}}]}

    # ------------------------------------------------------------ llama-server
    @app.post("/completion")
    async def completion(request: Request):
        job = llama_api.parse_llama_completion(await json_body(request), tokenizer, settings)
        return respond(await generation.llama_completion(request, job))

    @app.get("/health")
    @app.get("/v1/health", include_in_schema=False)
    async def health():
        return {"status": "ok"}

    @app.get("/props")
    async def props():
        return llama_api.props(engine, tokenizer, settings, __version__)

    @app.get("/slots")
    async def slots():
        return llama_api.slots(engine, settings, generation.task_ids)

    @app.get("/metrics")
    async def metrics():
        if not settings.metrics:
            raise ApiError(501, "the metrics endpoint is disabled; start the server with --metrics",
                           code="not_supported")
        return Response(generation.metrics.render(), media_type=CONTENT_TYPE)

    return app
