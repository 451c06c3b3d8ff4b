"""OpenAI response objects and stream chunks, with llama-server's `timings` and vLLM's
`metrics.speculative_decoding` appended to final responses."""
from __future__ import annotations

import codecs

from ..engine.request import RequestOutput, TokenLogprob
from .openai_schema import Job
from .token_text import TokenTexts


def usage(n_prompt: int, n_completion: int) -> dict:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_completion, "total_tokens": n_prompt + n_completion,
            "prompt_tokens_details": {"cached_tokens": 0}}


def output_usage(*outs: RequestOutput) -> dict:
    """The prompt once, the completions of every choice."""
    return usage(len(outs[0].prompt_token_ids), sum(len(o.token_ids) for o in outs))


def stop_reason(job: Job, out: RequestOutput):
    """vLLM's `stop_reason`: the stop string or stop token id that ended generation (None for EOS)."""
    reason = out.stop_reason
    if isinstance(reason, str) or (isinstance(reason, int) and reason in job.params.stop_token_ids):
        return reason
    return None


def chat_logprobs(texts: TokenTexts, entries: list[TokenLogprob]) -> dict:
    def item(token_id: int, logprob: float) -> dict:
        text, raw = texts.get(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(raw)}

    return {"content": [{**item(e.token_id, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]}
                        for e in entries]}


class TextOffsets:
    """Character offset of each token in the completion text (tokens may split a character)."""

    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.chars = 0

    def next(self, raw: bytes) -> int:
        offset = self.chars
        self.chars += len(self.decoder.decode(raw))
        return offset


def completion_logprobs(texts: TokenTexts, entries: list[TokenLogprob], offsets: TextOffsets) -> dict:
    """The legacy completions shape (`offsets` carries on across stream chunks)."""
    return {"tokens": [texts(e.token_id) for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{texts(e.token_id): e.logprob, **{texts(t): lp for t, lp in e.top}} for e in entries],
            "text_offset": [offsets.next(texts.get(e.token_id)[1]) for e in entries]}


def chat_response(response_id: str, created: int, model: str, job: Job, outs: list[RequestOutput],
                  logprobs: list[dict | None], extras: dict) -> dict:
    return {
        "id": response_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": out.text},
                     "logprobs": lp, "finish_reason": out.finish_reason, "stop_reason": stop_reason(job, out)}
                    for i, (out, lp) in enumerate(zip(outs, logprobs))],
        "usage": output_usage(*outs), **extras,
    }


def completion_response(response_id: str, created: int, model: str, job: Job, outs: list[RequestOutput],
                        logprobs: list[dict | None], extras: dict) -> dict:
    return {
        "id": response_id, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": i, "text": out.text, "logprobs": lp, "finish_reason": out.finish_reason,
                     "stop_reason": stop_reason(job, out)} for i, (out, lp) in enumerate(zip(outs, logprobs))],
        "usage": output_usage(*outs), **extras,
    }


def chat_chunk(response_id: str, created: int, model: str, delta: dict, finish_reason: str | None = None,
               logprobs: dict | None = None, stop: str | int | None = None, extras: dict | None = None,
               index: int = 0) -> dict:
    choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop
    return {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [choice], "usage": None, **(extras or {})}


def completion_chunk(response_id: str, created: int, model: str, text: str, finish_reason: str | None = None,
                     logprobs: dict | None = None, stop: str | int | None = None,
                     extras: dict | None = None, index: int = 0) -> dict:
    choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop
    return {"id": response_id, "object": "text_completion", "created": created, "model": model,
            "choices": [choice], "usage": None, **(extras or {})}


def usage_chunk(response_id: str, created: int, model: str, obj: str, outs: list[RequestOutput],
                extras: dict) -> dict:
    """The final chunk of `stream_options.include_usage`: no choices, the full usage."""
    return {"id": response_id, "object": obj, "created": created, "model": model, "choices": [],
            "usage": output_usage(*outs), **extras}
