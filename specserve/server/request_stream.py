"""The bridge from the engine thread to asyncio: one request's updates, delivered on the event loop."""
from __future__ import annotations

import asyncio
import collections

from ..engine.request import Request, RequestOutput


class RequestStream:
    """Receives one request's updates (from the engine thread) on the event loop.

    With `every_step` the engine hands over a snapshot after each step (streaming);
    otherwise only the final output arrives, through `push` (called by the server's
    finish listener), so a non-streaming request costs the event loop nothing per step.
    Each update's `logprobs` holds only the entries of its `new_token_ids`: the engine's
    list keeps growing on the engine thread, so the slice is taken there.

    Waking the event loop from the engine thread costs that thread tens of microseconds, as
    much as a tenth of a decode step, so the engine wakes it only for a request's first and
    last update; in between the event loop collects the updates itself every FLUSH_SECONDS.
    """
    FLUSH_SECONDS = 0.002

    def __init__(self, request: Request, aloop: asyncio.AbstractEventLoop, every_step: bool = True):
        self.request = request
        self.aloop = aloop
        self.queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self.finished = False
        self.pending: collections.deque[RequestOutput] = collections.deque()   # engine thread -> loop
        self.woken = False           # the engine thread has woken the loop for the first update
        self.timer: asyncio.TimerHandle | None = None
        if every_step:
            request.on_update = self.push

    def push(self, out: RequestOutput) -> None:     # engine thread
        if out.logprobs is not None:
            end = len(out.token_ids)
            out.logprobs = list(out.logprobs[end - len(out.new_token_ids):end])
        self.pending.append(out)
        if self.woken and not out.finished:
            return                   # the loop's own timer collects it
        self.woken = True
        try:
            self.aloop.call_soon_threadsafe(self._collect)
        except RuntimeError:       # the event loop has shut down; nobody is listening any more
            pass

    def _collect(self) -> None:                    # event loop
        done = False
        while self.pending:
            out = self.pending.popleft()
            done = done or out.finished
            self.queue.put_nowait(out)
        if done:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
        elif self.timer is None:
            self.timer = self.aloop.call_later(self.FLUSH_SECONDS, self._tick)

    def _tick(self) -> None:
        self.timer = None
        self._collect()

    async def next(self) -> RequestOutput:
        out = await self.queue.get()
        self.finished = out.finished
        return out
