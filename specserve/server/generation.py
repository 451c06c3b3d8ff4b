"""Turns validated jobs into engine requests (through the engine service) and their updates into
HTTP responses: whole JSON bodies, OpenAI SSE streams and llama-server /completion streams.

A request ends early when its client disconnects or the server's --timeout passes; either
way it is aborted in the engine, so its slot frees at the next step.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import Request as HttpRequest

from ..engine.engine import Engine
from ..engine.request import Request, RequestOutput
from ..engine.service import EngineService
from ..errors import ContextOverflowError, InvalidRequestError
from ..models.tokenizer import Tokenizer
from . import llama_api
from . import openai_responses as oai
from .request_stream import RequestStream
from .errors import ApiError, bad_request
from .metrics import ServerMetrics
from .openai_schema import Job, choice_jobs
from .settings import ServerSettings
from .token_text import TokenTexts

log = logging.getLogger("specserve.server")


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class Running:
    """One submitted job: its engine request, its update stream and its timeout."""

    def __init__(self, job: Job, request: Request, stream: RequestStream):
        self.job, self.request, self.stream = job, request, stream
        self.timed_out = False
        self.timer: asyncio.TimerHandle | None = None
        self.logprobs: list = []          # every token's entry, gathered from the updates


class Generation:
    def __init__(self, engine: Engine, tokenizer: Tokenizer | None, settings: ServerSettings):
        self.engine, self.tokenizer, self.settings = engine, tokenizer, settings
        self.service = EngineService(engine)
        self.metrics = ServerMetrics(engine, settings.model_name)
        self.final_only: dict[str, RequestStream] = {}    # non-streaming requests, by id
        self.num_spec_tokens = engine.driver.max_draft()
        self.texts = TokenTexts(tokenizer)
        self.service.listeners.append(self._on_finish)

    @property
    def task_ids(self) -> dict[str, int]:
        return self.service.task_ids

    # ------------------------------------------------------------ engine side
    def _on_finish(self, r: Request, task: int) -> None:
        """Engine thread: count the request, print llama-server's lines, hand a non-streaming request its
        output (in that order: once a client has its answer, the metrics and the log include it)."""
        try:        # bookkeeping must never fail a request or the engine step
            self.metrics.observe_finished(r)
            log.info("\n".join(self.service.finished_lines(r, task)))
        except Exception:
            log.exception("statistics for request %s failed", r.request_id)
        waiting = self.final_only.pop(r.request_id, None)
        if waiting is not None:
            waiting.push(r.snapshot())

    # ------------------------------------------------------------ submission
    def submit(self, job: Job, request_id: str, prompt_param: str) -> Running:
        request = Request(request_id, job.prompt_ids, job.params)
        stream = RequestStream(request, asyncio.get_running_loop(), every_step=job.stream)
        running = Running(job, request, stream)
        if not job.stream:
            self.final_only[request_id] = stream
        try:
            task = self.service.submit(request)
        except InvalidRequestError as exc:      # ContextOverflowError included
            self.final_only.pop(request_id, None)
            code = "context_length_exceeded" if isinstance(exc, ContextOverflowError) else "invalid_value"
            raise bad_request(str(exc), exc.param or prompt_param, code) from None
        log.info("task %d: queued %s (%d prompt tokens)", task, request_id, len(job.prompt_ids))
        if self.settings.timeout > 0:
            running.timer = asyncio.get_running_loop().call_later(self.settings.timeout, self._time_out, running)
        return running

    def _time_out(self, running: Running) -> None:
        if not running.stream.finished:
            running.timed_out = True
            self.service.abort(running.request.request_id)

    def _release(self, running: Running) -> None:
        if running.timer is not None:
            running.timer.cancel()
        if not running.stream.finished:     # the client went away: free the slot
            self.service.abort(running.request.request_id)

    async def _next(self, running: Running) -> RequestOutput:
        out = await running.stream.next()
        if out.logprobs:
            running.logprobs.extend(out.logprobs)
        return out

    def failure(self, running: Running, out: RequestOutput) -> ApiError | None:
        if out.finish_reason == "error":
            return ApiError(500, out.error or "internal error", code="internal_error")
        if out.finish_reason == "abort":
            if running.timed_out:
                return ApiError(408, f"the request did not finish within the server's timeout of "
                                     f"{self.settings.timeout:g} s (--timeout)", code="timeout")
            return ApiError(500, "the request was aborted", code="aborted")
        return None

    def extras(self, running: Running, out: RequestOutput) -> dict:
        """llama-server's `timings` and vLLM's per-request speculative metrics."""
        extras = {"timings": out.timings}
        if self.engine.driver.enabled:
            extras["metrics"] = {"speculative_decoding": running.request.draft_stats.vllm_metrics(self.num_spec_tokens)}
        return extras

    async def run_to_end(self, http: HttpRequest, runs: list[Running]) -> list[RequestOutput]:
        """Wait for the final updates of non-streaming requests (aborting them if the client leaves)."""
        watcher = asyncio.create_task(self._abort_on_disconnect(http, runs))
        outs = []
        try:
            for running in runs:
                while True:
                    out = await self._next(running)
                    if out.finished:
                        break
                outs.append(out)
        finally:
            watcher.cancel()
            for running in runs:
                self._release(running)
        for running, out in zip(runs, outs):
            error = self.failure(running, out)
            if error is not None:
                raise error
        return outs

    async def _abort_on_disconnect(self, http: HttpRequest, runs: list[Running]) -> None:
        while True:
            message = await http.receive()
            if message["type"] == "http.disconnect":
                for running in runs:
                    log.info("client of %s disconnected; aborting it", running.request.request_id)
                    self.service.abort(running.request.request_id)
                return

    # ------------------------------------------------------------ OpenAI routes
    def submit_choices(self, job: Job, response_id: str, prompt_param: str) -> list[Running]:
        """One engine request per choice (`n`); all or none are queued."""
        jobs = choice_jobs(job)
        runs: list[Running] = []
        try:
            for i, choice in enumerate(jobs):
                runs.append(self.submit(choice, response_id if len(jobs) == 1 else f"{response_id}-{i}",
                                        prompt_param))
        except Exception:
            for running in runs:
                self._release(running)
            raise
        return runs

    async def openai(self, http: HttpRequest, job: Job, chat: bool):
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        runs = self.submit_choices(job, response_id, "messages" if chat else "prompt")
        if job.stream:
            return self.openai_stream(runs, response_id, chat)
        outs = await self.run_to_end(http, runs)
        texts, extras = self.texts, self.extras(runs[0], outs[0])
        created, model = int(time.time()), self.settings.model_name
        if chat:
            logprobs = [oai.chat_logprobs(texts, r.logprobs) if job.want_logprobs else None for r in runs]
            return oai.chat_response(response_id, created, model, job, outs, logprobs, extras)
        logprobs = [oai.completion_logprobs(texts, r.logprobs, oai.TextOffsets()) if job.want_logprobs else None
                    for r in runs]
        return oai.completion_response(response_id, created, model, job, outs, logprobs, extras)

    async def openai_stream(self, runs: list[Running], response_id: str, chat: bool) -> AsyncIterator[str]:
        """SSE chunks of every choice as they come (each chunk names its choice's `index`)."""
        job, texts = runs[0].job, self.texts
        created, model = int(time.time()), self.settings.model_name
        sent_role = [False] * len(runs)
        offsets = [oai.TextOffsets() for _ in runs]
        finals: list[RequestOutput | None] = [None] * len(runs)
        updates: asyncio.Queue = asyncio.Queue()

        async def pump(index: int, running: Running) -> None:
            while True:
                out = await self._next(running)
                await updates.put((index, out))
                if out.finished:
                    return

        pumps = [asyncio.create_task(pump(i, r)) for i, r in enumerate(runs)]
        try:
            while any(f is None for f in finals):
                index, out = await updates.get()
                error = self.failure(runs[index], out) if out.finished else None
                if error is not None:
                    yield sse(error.body())
                    break
                per_token = {"timings": out.timings} if job.timings_per_token else {}
                if job.continuous_usage:
                    per_token["usage"] = oai.output_usage(out)
                has_logprobs = job.want_logprobs and bool(out.new_token_ids)
                if out.new_text or has_logprobs or (chat and not sent_role[index] and out.finished):
                    if chat:
                        delta = {"content": out.new_text}
                        if not sent_role[index]:
                            delta = {"role": "assistant", **delta}
                            sent_role[index] = True
                        logprobs = oai.chat_logprobs(texts, out.logprobs) if has_logprobs else None
                        yield sse(oai.chat_chunk(response_id, created, model, delta, logprobs=logprobs,
                                                 extras=per_token, index=index))
                    else:
                        logprobs = (oai.completion_logprobs(texts, out.logprobs, offsets[index])
                                    if has_logprobs else None)
                        yield sse(oai.completion_chunk(response_id, created, model, out.new_text,
                                                       logprobs=logprobs, extras=per_token, index=index))
                if out.finished:
                    finals[index] = out
                    last = {**self.extras(runs[index], out), **per_token}
                    stop = oai.stop_reason(job, out)
                    chunk = oai.chat_chunk if chat else oai.completion_chunk
                    yield sse(chunk(response_id, created, model, {} if chat else "", out.finish_reason,
                                    stop=stop, extras=last, index=index))
            else:
                if job.include_usage:
                    obj = "chat.completion.chunk" if chat else "text_completion"
                    yield sse(oai.usage_chunk(response_id, created, model, obj, finals,
                                              self.extras(runs[0], finals[0])))
            yield "data: [DONE]\n\n"
        finally:
            for task in pumps:
                task.cancel()
            for running in runs:
                self._release(running)

    # ------------------------------------------------------------ llama-server /completion
    async def llama_completion(self, http: HttpRequest, job: Job):
        running = self.submit(job, f"cmpl-{uuid.uuid4().hex}", "prompt")
        if job.stream:
            return self.llama_stream(running)
        (out,) = await self.run_to_end(http, [running])
        texts = self.texts
        probabilities = llama_api.completion_probabilities(texts, running.logprobs) if job.want_logprobs else None
        return llama_api.final_response(running.request, out, job, self.settings, out.text, list(out.token_ids),
                                        probabilities, self.extras(running, out))

    async def llama_stream(self, running: Running) -> AsyncIterator[str]:
        job, texts = running.job, self.texts
        try:
            while True:
                out = await self._next(running)
                error = self.failure(running, out) if out.finished else None
                if error is not None:
                    yield sse(error.body())
                    break
                if out.new_text or out.new_token_ids:
                    yield sse(llama_api.partial_chunk(running.request, out, texts, job))
                if out.finished:
                    yield sse(llama_api.final_response(running.request, out, job, self.settings, "", [], None,
                                                       self.extras(running, out)))
                    break
        finally:
            self._release(running)
