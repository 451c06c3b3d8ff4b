"""The engine's step loop on one background thread.

Front ends never step the engine themselves: they queue requests (`submit`, `abort`, from any
thread) and the loop thread runs `engine.step()` while any request is waiting or running, and
sleeps on a condition variable otherwise.
"""
from __future__ import annotations

import logging
import threading
import time

import torch

from .engine import Engine
from .request import Request

log = logging.getLogger("specserve.engine")


class EngineLoop:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.wakeup = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self.wakeup:
            self.stopping = True
            self.wakeup.notify()
        self.thread.join(timeout=30)

    def submit(self, request: Request) -> None:
        """Queue a request (raises InvalidRequestError / ContextOverflowError for bad ones)."""
        with self.wakeup:
            self.engine.add_request(request)
            self.wakeup.notify()

    def abort(self, request_id: str) -> None:
        # the request frees its slot at the loop's next step
        self.engine.abort(request_id)
        with self.wakeup:
            self.wakeup.notify()

    def _run(self) -> None:
        torch.inference_mode().__enter__()      # for the thread's lifetime: no per-step mode switch
        while True:
            with self.wakeup:
                while not self.stopping and not self.engine.has_work():
                    self.wakeup.wait()
                if self.stopping:
                    return
            try:
                self.engine.step()
            except Exception:     # the engine catches step errors itself; this is the last line of defence
                log.exception("engine step failed outside a request; aborting the requests in flight")
                self._abort_everything()
                time.sleep(0.05)

    def _abort_everything(self) -> None:
        engine = self.engine
        with engine.lock:
            ids = [r.request_id for r in list(engine.waiting) + [r for r in engine.slots if r is not None]]
        for request_id in ids:
            engine.abort(request_id)
