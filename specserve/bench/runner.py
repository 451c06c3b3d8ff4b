"""Sends the samples: a pool of `concurrency` workers, each running one sample's turns in order.

Chat: every turn is appended as a user message and the reply as an assistant message, one
request per turn (as llama.cpp's SPEED-Bench client does). Completion: the prompt of a later
turn is the previous prompt, its reply, a newline (unless the reply ends with one) and the
new turn. A failed turn ends its sample; the sample is reported as failed with the error.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Protocol

from tqdm import tqdm

from .results import SampleResult, TurnResult
from .samples import Sample, completion_prompt

ENDPOINTS = ("chat", "completion")


class Target(Protocol):
    def send(self, body: dict, endpoint: str) -> TurnResult: ...
    def describe(self) -> dict: ...
    def close(self) -> None: ...


@dataclass
class Workload:
    endpoint: str = "chat"
    osl: int = 256                              # max_tokens of every request
    extra_inputs: dict = field(default_factory=dict)
    stream: bool = True

    def body(self, conversation: list[dict] | str) -> dict:
        """llama.cpp's order: the extra inputs first, then max_tokens forced to --osl."""
        body = dict(self.extra_inputs)
        body["messages" if self.endpoint == "chat" else "prompt"] = conversation
        body["max_tokens"] = self.osl
        body["stream"] = self.stream
        if self.stream:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        else:
            body.pop("stream_options", None)
        return body


def run_sample(target: Target, sample: Sample, workload: Workload) -> SampleResult:
    turns: list[TurnResult] = []
    messages: list[dict] = []
    prompt = ""
    for text in sample.turns:
        if workload.endpoint == "chat":
            messages.append({"role": "user", "content": text})
            conversation = list(messages)
        else:
            prompt = completion_prompt(prompt, text)
            conversation = prompt
        try:
            turn = target.send(workload.body(conversation), workload.endpoint)
        except Exception as exc:     # a bug or an odd reply must cost one sample, not the run
            turn = TurnResult(error=f"{type(exc).__name__}: {exc}")
        turns.append(turn)
        if turn.error is not None:
            break
        messages.append({"role": "assistant", "content": turn.text})
        prompt += turn.text
    return SampleResult.from_turns(sample.question_id, sample.category, turns)


def run_samples(target: Target, samples: list[Sample], workload: Workload, concurrency: int = 1,
                progress: bool = True, desc: str = "bench") -> tuple[list[SampleResult], float]:
    """(results in the samples' order, elapsed seconds)."""
    results: list[SampleResult | None] = [None] * len(samples)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool, \
            tqdm(total=len(samples), desc=desc, unit="sample", disable=not progress) as bar:
        futures = {pool.submit(run_sample, target, s, workload): i for i, s in enumerate(samples)}
        for future in as_completed(futures):
            result = future.result()
            results[futures[future]] = result
            bar.update(1)
            if not result.success:
                bar.set_postfix_str(f"failed: {sum(1 for r in results if r is not None and not r.success)}")
    return [r for r in results if r is not None], time.perf_counter() - t0
