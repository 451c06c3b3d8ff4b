"""Benchmark requests run in this process on the engine, without a server.

The same request bodies as over HTTP are validated by the server's own parsers (so the
fields, defaults and errors are the server's), the engine steps on a background thread
(the engine service, as in the server), and each worker thread waits for its request to finish. The
figures are the ones the server would return: `usage`, `timings` and
`metrics.speculative_decoding`; TTFT is arrival to first token inside the engine.
"""
from __future__ import annotations

import itertools
import time

from ..engine.engine import Engine
from ..engine.request import Request
from ..engine.service import EngineService
from ..errors import InvalidRequestError
from ..models.tokenizer import Tokenizer
from ..server.errors import ApiError
from ..server.openai_responses import output_usage
from ..server.openai_schema import check_room, parse_chat, parse_completion
from ..sampling import LLAMA_CPP_DEFAULTS
from .results import TurnResult, turn_from_response


class EngineTarget:
    def __init__(self, engine: Engine, tokenizer: Tokenizer | None, description: dict):
        self.engine, self.tokenizer = engine, tokenizer
        self.description = description
        self.defaults = LLAMA_CPP_DEFAULTS
        self.num_spec_tokens = engine.driver.max_draft()
        self._ids = itertools.count()
        self.service = EngineService(engine)
        self.service.start()

    def describe(self) -> dict:
        return dict(self.description)

    def send(self, body: dict, endpoint: str) -> TurnResult:
        t0 = time.perf_counter()
        request_id = f"bench-{next(self._ids)}"
        try:
            parse = parse_chat if endpoint == "chat" else parse_completion
            job = parse(body, self.tokenizer, self.defaults)
            check_room(job, self.engine.ctx_size)
            request = Request(request_id, job.prompt_ids, job.params)
            self.service.submit(request)
        except (ApiError, InvalidRequestError) as exc:   # the server's checks, then the engine's
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            return TurnResult(latency=time.perf_counter() - t0, error=f"invalid request: {message}")
        self.service.wait(request)
        latency = time.perf_counter() - t0
        out = request.snapshot()
        if out.finish_reason in ("error", "abort"):
            return TurnResult(latency=latency, error=f"request {out.finish_reason}: {out.error or 'no detail'}")
        ttft = request.t_first_token - request.t_arrival if out.token_ids else None
        metrics = None
        if self.engine.driver.enabled:
            metrics = {"speculative_decoding": request.draft_stats.vllm_metrics(self.num_spec_tokens)}
        return turn_from_response(out.text, output_usage(out), out.timings, metrics, out.finish_reason, latency,
                                  ttft)

    def close(self) -> None:
        self.service.stop()
