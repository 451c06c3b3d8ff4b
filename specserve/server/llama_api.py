"""llama-server's native API: the /completion request and response, /props and /slots.

As llama-server does, /completion ignores fields it does not know; fields that would
change the output and that this server does not implement (penalties, grammars, other
samplers) are rejected unless they hold their neutral value.
"""
from __future__ import annotations

from ..engine.engine import Engine
from ..engine.request import Request, RequestOutput, TokenLogprob
from ..models.tokenizer import Tokenizer
from ..sampling import WHOLE_HISTORY, SamplingParams
from .body import Body, describe
from .errors import bad_request
from .openai_schema import Job, make_params, sampling_fields
from .settings import ServerSettings
from .token_text import TokenTexts

NEUTRAL_SAMPLERS = {
    "mirostat": (None, 0), "typical_p": (None, 1, 1.0), "dynatemp_range": (None, 0, 0.0),
    "xtc_probability": (None, 0, 0.0), "dry_multiplier": (None, 0, 0.0), "top_n_sigma": (None, -1, -1.0),
    "grammar": (None, ""), "json_schema": (None,), "lora": (None,),
}


def llama_prompt(body: Body, tokenizer: Tokenizer | None) -> tuple[list[int], str]:
    """`prompt`: a string, token ids, or a mix of both ([12, 34, "text", 56])."""
    prompt = body.raw("prompt")
    if prompt is None:
        raise bad_request("'prompt' is required", "prompt", "missing_required_parameter")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    pieces = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(pieces, list) or any(isinstance(p, bool) or not isinstance(p, (str, int)) for p in pieces):
        raise bad_request(f"'prompt' must be a string, an array of token ids or a mix of both, got "
                          f"{describe(prompt)} (batched prompts are not supported)", "prompt", "invalid_type")
    if any(isinstance(p, str) for p in pieces) and tokenizer is None:
        raise bad_request("this model folder has no tokenizer.json; send the prompt as token ids", "prompt")
    ids: list[int] = []
    for i, piece in enumerate(pieces):
        if isinstance(piece, str):
            ids.extend(tokenizer.encode(piece, add_special_tokens=(i == 0)))
        elif piece < 0:
            raise bad_request(f"'prompt' token ids must be non-negative, got {piece}", "prompt")
        else:
            ids.append(piece)
    return ids, prompt if isinstance(prompt, str) else ""


def parse_llama_completion(data: dict, tokenizer: Tokenizer | None, settings: ServerSettings) -> Job:
    body = Body(data)
    prompt_ids, prompt_text = llama_prompt(body, tokenizer)
    default_n = -1 if settings.defaults.max_tokens is None else settings.defaults.max_tokens
    n_predict = body.integer("n_predict", default_n, minimum=-1)
    if n_predict == 0:
        raise bad_request("'n_predict' must be -1 (until EOS or the context is full) or a positive integer",
                          "n_predict")
    for name, neutral in NEUTRAL_SAMPLERS.items():
        body.unsupported(name, neutral)
    fields = sampling_fields(body, settings.defaults, tokenizer, temperature_min=None, temperature_max=None)
    fields["max_tokens"] = None if n_predict < 0 else n_predict
    n_probs = body.integer("n_probs", 0, 0, 20)
    fields["logprobs"] = n_probs if n_probs > 0 else None
    return Job(prompt_ids, make_params(**fields), prompt_text, body.boolean("stream"), False, n_probs > 0,
               body.boolean("timings_per_token"))


def generation_settings(params: SamplingParams, settings: ServerSettings, stream: bool = False) -> dict:
    spec = settings.spec_options
    return {
        "n_predict": -1 if params.max_tokens is None else params.max_tokens,
        "seed": -1 if params.seed is None else params.seed,
        "temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p, "min_p": params.min_p,
        "stop": list(params.stop), "ignore_eos": params.ignore_eos,
        "repeat_penalty": params.repetition_penalty, "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "repeat_last_n": -1 if (params.penalty_last_n or 0) >= WHOLE_HISTORY else params.penalty_last_n,
        "logit_bias": [[t, b if b != float("-inf") else False] for t, b in params.logit_bias.items()],
        "n_probs": params.logprobs or 0, "stream": stream,
        "speculative.types": ",".join(settings.spec_types) or "none",
        "speculative.n_max": spec.get("spec_draft_n_max"), "speculative.n_min": spec.get("spec_draft_n_min"),
        "speculative.p_min": spec.get("spec_draft_p_min"),
    }


def completion_probabilities(texts: TokenTexts, entries: list[TokenLogprob]) -> list[dict]:
    def item(token_id: int, logprob: float) -> dict:
        text, raw = texts.get(token_id)
        return {"id": token_id, "token": text, "bytes": list(raw), "logprob": logprob}

    return [{**item(e.token_id, e.logprob), "top_logprobs": [item(t, lp) for t, lp in e.top]} for e in entries]


def stop_type(out: RequestOutput) -> str:
    if out.finish_reason == "stop":
        return "word" if isinstance(out.stop_reason, str) else "eos"
    return "limit" if out.finish_reason == "length" else "none"


def partial_chunk(request: Request, out: RequestOutput, texts: TokenTexts, job: Job) -> dict:
    chunk = {"index": 0, "content": out.new_text, "tokens": list(out.new_token_ids), "stop": False,
             "id_slot": request.slot, "tokens_predicted": len(out.token_ids),
             "tokens_evaluated": len(out.prompt_token_ids)}
    if job.want_logprobs and out.logprobs:
        chunk["completion_probabilities"] = completion_probabilities(texts, out.logprobs)
    if job.timings_per_token:
        chunk["timings"] = out.timings
    return chunk


def final_response(request: Request, out: RequestOutput, job: Job, settings: ServerSettings, content: str,
                   tokens: list[int], probabilities: list[dict] | None, extras: dict) -> dict:
    response = {
        "index": 0, "content": content, "tokens": tokens, "id_slot": request.slot, "stop": True,
        "model": settings.model_name, "tokens_predicted": len(out.token_ids),
        "tokens_evaluated": len(out.prompt_token_ids),
        "generation_settings": generation_settings(job.params, settings, job.stream),
        "prompt": job.prompt_text, "has_new_line": "\n" in out.text, "truncated": False,
        "stop_type": stop_type(out), "stopping_word": out.stop_reason if isinstance(out.stop_reason, str) else "",
        "tokens_cached": len(out.prompt_token_ids) + max(len(out.token_ids) - 1, 0), **extras,
    }
    if probabilities is not None:
        response["completion_probabilities"] = probabilities
    return response


def props(engine: Engine, tokenizer: Tokenizer | None, settings: ServerSettings, version: str) -> dict:
    special = tokenizer.special if tokenizer is not None else {}
    return {
        "default_generation_settings": {"id": 0, "n_ctx": engine.ctx_size, "speculative": engine.driver.enabled,
                                        "is_processing": False,
                                        "params": generation_settings(settings.defaults, settings)},
        "total_slots": engine.n_parallel, "model_path": settings.model_path, "model_alias": settings.model_name,
        "chat_template": (tokenizer.chat_template or "") if tokenizer is not None else "",
        "bos_token": special.get("bos_token") or "", "eos_token": special.get("eos_token") or "",
        "modalities": {"vision": False, "audio": False}, "build_info": f"specserve {version}",
        "endpoint_slots": True, "endpoint_metrics": settings.metrics,
        "speculative": {"types": settings.spec_types,
                        "n_max": engine.driver.max_draft()},
    }


def slots(engine: Engine, settings: ServerSettings, task_ids: dict[str, int]) -> list[dict]:
    out = []
    for slot, request in enumerate(list(engine.slots)):
        entry = {"id": slot, "id_task": -1, "n_ctx": engine.ctx_size, "speculative": engine.driver.enabled,
                 "is_processing": request is not None}
        if request is not None:
            params = request.params
            n_decoded = len(request.output_ids)
            entry.update({
                "id_task": task_ids.get(request.request_id, -1), "state": request.state.value,
                "params": generation_settings(params, settings),
                "prompt_n": len(request.prompt_ids),
                "next_token": {"has_next_token": not request.finished, "n_decoded": n_decoded,
                               "n_remain": -1 if params.max_tokens is None else params.max_tokens - n_decoded},
                "spec": request.draft_stats.as_dict(),
            })
        out.append(entry)
    return out
