"""Validation of /v1/chat/completions and /v1/completions bodies into a Job for the engine.

Field names and ranges follow OpenAI's API, plus the extras vLLM and llama-server accept
(`top_k`, `min_p`, `ignore_eos`, `stop_token_ids`, `timings_per_token`...). Unknown fields
are rejected as OpenAI does; fields this server does not implement are accepted only at
their neutral value, so nothing a client asks for is silently ignored.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import InvalidRequestError
from ..models.tokenizer import Tokenizer
from ..sampling import SamplingParams
from .body import Body, describe
from .errors import bad_request
from .penalty_fields import penalty_fields

SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1
MAX_CHOICES = 64                          # most choices (`n`) per request
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")

# accepted and without effect on generation
IGNORED_FIELDS = frozenset({"model", "user", "metadata", "store", "service_tier", "parallel_tool_calls",
                            "cache_prompt", "prompt_cache_key", "safety_identifier", "id_slot"})


@dataclass
class Job:
    """A validated generation request."""
    prompt_ids: list[int]
    params: SamplingParams
    prompt_text: str = ""
    stream: bool = False
    include_usage: bool = False
    want_logprobs: bool = False           # params.logprobs = how many alternatives per token
    timings_per_token: bool = False
    max_tokens_given: bool = True         # False: max_tokens is the server's default (-n)
    continuous_usage: bool = False        # usage so far on every stream chunk (vLLM)
    n: int = 1                            # choices: n requests with seeds seed, seed+1, ... (or random)


def sampling_fields(body: Body, defaults: SamplingParams, tokenizer: Tokenizer | None,
                    temperature_min: float | None = 0.0, temperature_max: float | None = 2.0) -> dict:
    """The sampling fields every generation route shares, as SamplingParams keyword arguments."""
    top_k = body.integer("top_k", defaults.top_k, minimum=-1)
    return {
        **penalty_fields(body, defaults, tokenizer),
        "temperature": body.number("temperature", defaults.temperature, temperature_min, temperature_max),
        "top_p": body.number("top_p", defaults.top_p, 0.0, 1.0),
        "top_k": max(top_k, 0),
        "min_p": body.number("min_p", defaults.min_p, 0.0, 1.0),
        "seed": body.integer("seed", defaults.seed, SEED_MIN, SEED_MAX),
        "stop": body.strings("stop"),
        "stop_token_ids": body.token_ids("stop_token_ids"),
        "ignore_eos": body.boolean("ignore_eos", defaults.ignore_eos),
    }


def make_params(**fields) -> SamplingParams:
    try:
        return SamplingParams(**fields)
    except InvalidRequestError as exc:
        name = str(exc).split(":")[0].removeprefix("invalid ").strip()
        raise bad_request(str(exc), name) from None


def _openai_common(body: Body, defaults: SamplingParams, tokenizer: Tokenizer | None) -> tuple[dict, int]:
    """(SamplingParams fields, n)."""
    n = body.integer("n", 1, minimum=1, maximum=MAX_CHOICES)
    fields = sampling_fields(body, defaults, tokenizer)
    fields["max_tokens"] = body.integer("max_tokens", defaults.max_tokens, minimum=1)
    return fields, n


def _stream_options(body: Body, stream: bool) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats): the usage chunk at the end, and usage on every chunk."""
    options = body.obj("stream_options")
    unknown = sorted(set(options) - {"include_usage", "continuous_usage_stats"})
    if unknown:
        raise bad_request(f"Unrecognized stream_options field: {unknown[0]}", "stream_options", "unknown_parameter")
    if options and not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
    flags = []
    for name in ("include_usage", "continuous_usage_stats"):
        value = options.get(name, False)
        if not isinstance(value, bool):
            raise bad_request(f"'stream_options.{name}' must be a boolean, got {describe(value)}",
                              "stream_options", "invalid_type")
        flags.append(value)
    return flags[0], flags[0] and flags[1]


def _message_text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                got = f"a part of type {kind!r}" if kind else describe(part)
                raise bad_request(f"{where}.content[{j}]: only text parts are supported, got {got}",
                                  "messages", "unsupported_parameter")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"{where}.content must be a string or an array of text parts, got {describe(content)}",
                      "messages", "invalid_type")


def chat_messages(body: Body) -> list[dict]:
    messages = body.raw("messages")
    if messages is None:
        raise bad_request("'messages' is required", "messages", "missing_required_parameter")
    if not isinstance(messages, list):
        raise bad_request(f"'messages' must be an array, got {describe(messages)}", "messages", "invalid_type")
    if not messages:
        raise bad_request("'messages' must contain at least one message", "messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(f"{where} must be an object, got {describe(message)}", "messages", "invalid_type")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise bad_request(f"{where}.role must be one of {', '.join(CHAT_ROLES)}, got {describe(role)}",
                              "messages")
        content = message.get("content")
        if content is None and not (role == "assistant" and message.get("tool_calls")):
            raise bad_request(f"{where}.content is required", "messages", "missing_required_parameter")
        out.append({**message, "content": "" if content is None else _message_text(content, where)})
    return out


def parse_chat(data: dict, tokenizer: Tokenizer | None, defaults: SamplingParams) -> Job:
    body = Body(data)
    messages = chat_messages(body)
    stream = body.boolean("stream")
    include_usage, continuous_usage = _stream_options(body, stream)
    fields, n = _openai_common(body, defaults, tokenizer)
    fields["max_tokens"] = body.integer("max_completion_tokens", fields["max_tokens"], minimum=1)
    want_logprobs = body.boolean("logprobs")
    top_logprobs = body.integer("top_logprobs", None, 0, 20)
    if top_logprobs is not None and not want_logprobs:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    fields["logprobs"] = (top_logprobs or 0) if want_logprobs else None
    for name in ("tools", "functions", "prediction", "audio", "web_search_options", "reasoning_effort"):
        body.unsupported(name)
    body.unsupported("tool_choice", (None, "none", "auto"))
    body.unsupported("function_call", (None, "none", "auto"))
    body.unsupported("modalities", (None, ["text"]))
    response_format = body.obj("response_format")
    if response_format and response_format.get("type") != "text":
        raise bad_request(f"'response_format' of type {response_format.get('type')!r} is not supported by this "
                          "server (only 'text')", "response_format", "unsupported_parameter")
    add_generation_prompt = body.boolean("add_generation_prompt", True)
    template_kwargs = body.obj("chat_template_kwargs")
    timings_per_token = body.boolean("timings_per_token")
    body.reject_unknown(IGNORED_FIELDS)
    if tokenizer is None:
        raise bad_request("this model folder has no tokenizer.json, so chat requests cannot be served; "
                          "use /v1/completions with token ids", "messages")
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                             **template_kwargs)
    except InvalidRequestError as exc:
        raise bad_request(str(exc), "messages") from None
    given = data.get("max_tokens") is not None or data.get("max_completion_tokens") is not None
    return Job(tokenizer.encode(text, add_special_tokens=False), make_params(**fields), text, stream,
               include_usage, want_logprobs, timings_per_token, given, continuous_usage, n)


def completion_prompt(body: Body, tokenizer: Tokenizer | None) -> tuple[list[int], str]:
    """`prompt`: a string or an array of token ids (a one-element batch of either is unwrapped)."""
    prompt = body.raw("prompt")
    if prompt is None:
        raise bad_request("'prompt' is required", "prompt", "missing_required_parameter")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        raise bad_request(f"batched prompts ({len(prompt)} prompts) are not supported; send one request per prompt",
                          "prompt", "unsupported_parameter")
    if isinstance(prompt, str):
        if tokenizer is None:
            raise bad_request("this model folder has no tokenizer.json; send the prompt as token ids", "prompt")
        return tokenizer.encode(prompt), prompt
    if not isinstance(prompt, list):
        raise bad_request(f"'prompt' must be a string or an array of token ids, got {describe(prompt)}",
                          "prompt", "invalid_type")
    return body.token_ids("prompt"), ""


def parse_completion(data: dict, tokenizer: Tokenizer | None, defaults: SamplingParams) -> Job:
    body = Body(data)
    prompt_ids, prompt_text = completion_prompt(body, tokenizer)
    stream = body.boolean("stream")
    include_usage, continuous_usage = _stream_options(body, stream)
    fields, n = _openai_common(body, defaults, tokenizer)
    body.unsupported("best_of", (None, 1))
    body.unsupported("echo", (None, False))
    body.unsupported("suffix", (None, ""))
    logprobs = body.integer("logprobs", None, 0, 20)
    fields["logprobs"] = logprobs
    timings_per_token = body.boolean("timings_per_token")
    body.reject_unknown(IGNORED_FIELDS)
    return Job(prompt_ids, make_params(**fields), prompt_text, stream, include_usage, logprobs is not None,
               timings_per_token, data.get("max_tokens") is not None, continuous_usage, n)


def choice_jobs(job: Job) -> list[Job]:
    """One job per choice. Choice i is seeded with seed + i, so a seeded request is reproducible
    and choice 0 equals the same request with n = 1; without a seed each choice draws its own."""
    if job.n == 1:
        return [job]
    seed = job.params.seed
    return [dataclasses.replace(job, params=dataclasses.replace(
        job.params, seed=None if seed is None or seed < 0 else (seed + i) % (1 << 64))) for i in range(job.n)]


def check_room(job: Job, ctx_size: int) -> None:
    """vLLM's rule: the prompt plus the requested completion must fit the context
    (a server-default max_tokens is shortened instead)."""
    n_prompt, n_max = len(job.prompt_ids), job.params.max_tokens
    if n_max is not None and n_prompt < ctx_size and n_prompt + n_max > ctx_size:
        if not job.max_tokens_given:
            job.params.max_tokens = ctx_size - n_prompt
            return
        raise bad_request(f"This model's maximum context length is {ctx_size} tokens. However, you requested "
                          f"{n_prompt + n_max} tokens ({n_prompt} in the prompt, {n_max} in the completion). "
                          "Please reduce the length of the prompt or completion.", "max_tokens",
                          "context_length_exceeded")
