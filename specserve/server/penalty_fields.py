"""The logit-bias and penalty fields of a request, in OpenAI's and llama-server's spellings.

  presence_penalty, frequency_penalty   [-2, 2] (both APIs)
  repetition_penalty / repeat_penalty   (0, 10] (vLLM's / llama-server's name)
  repeat_last_n                         tokens of prompt + output the penalties look at
                                        (llama-server; -1 = all, 0 = penalties off)
  logit_bias                            {"token id": bias} (OpenAI), or llama-server's
                                        [[token id or text, bias or false], ...]; a text is
                                        tokenized and every token biased; false bans
As in llama-server, the penalties of every route look at the last `repeat_last_n` tokens
(the server's --repeat-last-n, 64 by default) unless the request says otherwise.
"""
from __future__ import annotations

import math

from ..models.tokenizer import Tokenizer
from ..sampling import WHOLE_HISTORY, SamplingParams
from .body import Body, describe
from .errors import bad_request


def penalty_fields(body: Body, defaults: SamplingParams, tokenizer: Tokenizer | None) -> dict:
    repetition = body.number("repeat_penalty", defaults.repetition_penalty, 0.0, 10.0)
    repetition = body.number("repetition_penalty", repetition, 0.0, 10.0)
    if repetition <= 0:
        raise bad_request("'repetition_penalty' must be > 0", "repetition_penalty")
    last_n = body.integer("repeat_last_n", defaults.penalty_last_n, minimum=-1)
    return {
        "presence_penalty": body.number("presence_penalty", defaults.presence_penalty, -2.0, 2.0),
        "frequency_penalty": body.number("frequency_penalty", defaults.frequency_penalty, -2.0, 2.0),
        "repetition_penalty": repetition,
        "penalty_last_n": WHOLE_HISTORY if last_n == -1 else last_n,
        "logit_bias": {**defaults.logit_bias, **parse_logit_bias(body.raw("logit_bias"), tokenizer)},
    }


def parse_logit_bias(value, tokenizer: Tokenizer | None) -> dict[int, float]:
    if value is None:
        return {}
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise bad_request(f"'logit_bias' must be an object {{\"token id\": bias}} or an array of [token, bias] "
                          f"pairs, got {describe(value)}", "logit_bias", "invalid_type")
    out: dict[int, float] = {}
    for token, bias in pairs:
        if bias is False:
            bias = -math.inf
        elif isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
            raise bad_request(f"'logit_bias' values must be finite numbers (or false to ban), got {describe(bias)} "
                              f"for {token!r}", "logit_bias", "invalid_type")
        for token_id in _token_ids(token, tokenizer):
            out[token_id] = float(bias)
    return out


def _token_ids(token, tokenizer: Tokenizer | None) -> list[int]:
    if isinstance(token, int) and not isinstance(token, bool) and token >= 0:
        return [token]
    if isinstance(token, str) and token.isdigit():
        return [int(token)]
    if isinstance(token, str) and token:
        if tokenizer is None:
            raise bad_request("this model folder has no tokenizer.json; give 'logit_bias' tokens as ids",
                              "logit_bias")
        return tokenizer.encode(token, add_special_tokens=False)
    raise bad_request(f"'logit_bias' keys must be token ids or texts, got {describe(token)}", "logit_bias",
                      "invalid_type")
