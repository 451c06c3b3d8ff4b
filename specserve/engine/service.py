"""Submitting, waiting for, aborting and accounting for requests on one engine: the one home for
what every front end needs (the HTTP server, the benchmark's in-process target, the Python API).

Two ways to run the steps: `start()` puts them on a background thread (EngineLoop; the server and
the benchmark) and `wait(request)` blocks until a request ends; `run(requests)` steps the engine
in the caller's thread until they all end (the Python API). Each request gets a task number, as
llama-server numbers them, and `finished_lines` are the lines llama-server prints for a finished
request. Finish listeners run on the stepping thread after the service's own bookkeeping.
"""
from __future__ import annotations

import itertools
import threading

import torch

from .engine import Engine
from .loop import EngineLoop
from .request import Request, RequestOutput, timing_lines


class EngineService:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.loop: EngineLoop | None = None
        self.task_ids: dict[str, int] = {}
        self._next_task = itertools.count()
        self._done: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.listeners: list = []              # callback(request, task) when a request has ended
        engine.finish_listeners.append(self._finished)

    # ------------------------------------------------------------ stepping
    def start(self) -> None:
        """Step the engine on a background thread from now on."""
        self.loop = EngineLoop(self.engine)
        self.loop.start()

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.stop()

    def run(self, requests: list[Request]) -> list[RequestOutput]:
        """Queue the requests and step in this thread until every one has ended."""
        for r in requests:
            self.engine.validate(r)
        for r in requests:
            self.submit(r)
        with torch.inference_mode():
            while not all(r.finished for r in requests):
                self.engine.step()
        return [r.snapshot() for r in requests]

    # ------------------------------------------------------------ requests
    def submit(self, request: Request) -> int:
        """Validate and queue a request (InvalidRequestError names what is wrong); returns its task number."""
        task = next(self._next_task)
        with self._lock:
            self.task_ids[request.request_id] = task
            self._done[request.request_id] = threading.Event()
        try:
            if self.loop is not None:
                self.loop.submit(request)
            else:
                self.engine.add_request(request)
        except Exception:
            with self._lock:
                self.task_ids.pop(request.request_id, None)
                self._done.pop(request.request_id, None)
            raise
        return task

    def abort(self, request_id: str) -> None:
        """End a request early (its slot frees at the next step)."""
        if self.loop is not None:
            self.loop.abort(request_id)
        else:
            self.engine.abort(request_id)

    def wait(self, request: Request, timeout: float | None = None) -> bool:
        """Block until the request has ended (background stepping); False on timeout."""
        with self._lock:
            done = self._done.get(request.request_id)
        return request.finished if done is None else done.wait(timeout)

    def _finished(self, request: Request) -> None:        # the stepping thread
        with self._lock:
            task = self.task_ids.pop(request.request_id, -1)
            done = self._done.pop(request.request_id, None)
        for listener in self.listeners:
            listener(request, task)
        if done is not None:
            done.set()

    # ------------------------------------------------------------ reporting
    def finished_lines(self, r: Request, task: int) -> list[str]:
        """llama-server's lines for a finished request: timings, its speculative statistics, the
        methods' cumulative statistics and the slot release."""
        if not r.t_start:
            return [f"task {task}: {r.finish_reason} while waiting for a slot"]
        timings = r.timings().as_dict(r.draft_stats)
        lines = [f"slot print_timing: id {r.slot:2d} | task {task} | "] + timing_lines(timings)
        lines += self.engine.request_stats_lines(r) + self.engine.driver_stats_lines()
        lines.append(f"slot      release: id {r.slot:2d} | task {task} | stop processing: "
                     f"n_tokens = {len(r.prompt_ids) + len(r.output_ids)}, finish_reason = {r.finish_reason}"
                     + (f", error = {r.error}" if r.error else ""))
        return lines
