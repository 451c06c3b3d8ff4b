"""The Python API: `LLM(model_dir, draft_model=None, spec_type="none", **options)`."""
from __future__ import annotations

import inspect
import itertools
import logging
from pathlib import Path

import torch

from .kernels import configure as configure_kernels
from .engine.engine import Engine
from .engine.service import EngineService
from .engine.request import Request, RequestOutput
from .errors import InvalidRequestError, OptionError
from .kernels.capi import CACHE_TYPES
from .kernels.packed import check_quant
from .models.step_batch import StepBatch
from .models.tokenizer import load_tokenizer
from .models.transformer import CausalLM
from .speculative.option_table import default_spec_options
from .sampling import SamplingParams
from .speculative.base import ProposerContext
from .speculative.driver import build_driver
from .speculative.registry import resolve_spec_types

log = logging.getLogger("specserve")

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
BUNDLED_MODEL = BUNDLED_DIR / "stdlib-coder"


def load_engine(model: str | Path | None = None, draft_model: str | Path | None = None,
                spec_type: str | list[str] | None = "none", n_parallel: int = 1, ctx_size: int = 0,
                n_batch: int = 512, dtype: str = "auto", threads: int | None = None, kernels: str | None = None,
                quant: str | None = None, cache_type_k: str = "f32", cache_type_v: str = "f32",
                slot_prompt_similarity: float = 0.1, **spec_options):
    """(engine, tokenizer) for a model folder or GGUF file, with the requested speculative types.

    threads: compute threads (0 = the physical cores; None keeps the process setting);
    kernels: auto / native / torch (None keeps the process setting, SPECSERVE_KERNELS by default);
    quant: None, "int8" or "q8", the target's weight quantization on the native kernels (--quant);
    cache_type_k / cache_type_v: the KV cache's element types, f32 (default), f16 or bf16 (native kernels).
    """
    for name, value in (("--cache-type-k", cache_type_k), ("--cache-type-v", cache_type_v)):
        if value not in CACHE_TYPES:
            raise OptionError(f"{name} must be one of {', '.join(CACHE_TYPES)}, got {value!r}")
    configure_kernels(kernels, threads)
    model_dir = Path(model) if model else BUNDLED_MODEL
    options = default_spec_options()
    unknown = sorted(set(spec_options) - set(options))
    if unknown:
        valid = sorted(set(options) | set(inspect.signature(load_engine).parameters) - {"spec_options"})
        raise OptionError(f"unknown option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    options.update(spec_options)
    if draft_model is not None:
        options["spec_draft_model"] = str(draft_model)
    types = resolve_spec_types(spec_type, bool(options.get("spec_default")))
    target = CausalLM.from_pretrained(model_dir, dtype=dtype)
    target.quant = check_quant(quant)
    target.prepare_native()
    # a folder without tokenizer.json (a GGUF without tokenizer metadata) still serves token-id prompts
    tokenizer = load_tokenizer(model_dir)
    ctx = ctx_size or target.config.max_position_embeddings
    if ctx > target.config.max_position_embeddings:
        log.warning("context size %d is beyond the %d positions %s was trained for: expect worse output past "
                    "them", ctx, target.config.max_position_embeddings, model_dir.name)
    driver = build_driver(types, ProposerContext(target=target, n_slots=n_parallel, max_ctx=ctx, options=options,
                                                 draft_model_dir=options.get("spec_draft_model"),
                                                 tokenizer=tokenizer))
    if not 0 <= slot_prompt_similarity <= 1:
        raise OptionError(f"--slot-prompt-similarity must be between 0 and 1, got {slot_prompt_similarity}")
    engine = Engine(target, tokenizer, n_parallel=n_parallel, ctx_size=ctx, n_batch=n_batch, driver=driver,
                    cache_types=(cache_type_k, cache_type_v), slot_prompt_similarity=slot_prompt_similarity)
    return engine, tokenizer


class LLM:
    """Offline batched generation, vLLM style.

    >>> llm = LLM(None, spec_type="ngram-simple", n_parallel=4)
    >>> outs = llm.generate(["def add(a, b):"], SamplingParams(temperature=0, max_tokens=32))
    """

    def __init__(self, model: str | Path | None = None, draft_model: str | Path | None = None,
                 spec_type: str | list[str] = "none", **options):
        self.engine, self.tokenizer = load_engine(model, draft_model, spec_type, **options)
        self.target = self.engine.target
        self.service = EngineService(self.engine)
        self._ids = itertools.count()

    def _prompt_ids(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidRequestError("this model folder has no tokenizer.json; pass token ids")
            return self.tokenizer.encode(prompt)
        return [int(t) for t in prompt]

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 ) -> list[RequestOutput]:
        """prompts: a string, a list of token ids, or a list of either. Outputs keep the input order."""
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise OptionError(f"{len(prompts)} prompts but {len(params)} sampling params")
        requests = [Request(f"req-{next(self._ids)}", self._prompt_ids(p), sp) for p, sp in zip(prompts, params)]
        return self.service.run(requests)

    def score(self, token_ids: list[int]) -> torch.Tensor:
        """The served target's float32 logits at every position, shape [len(token_ids), vocab]: the same
        forward (kernels, quantization) that generation uses, on a scratch cache."""
        ids = [int(t) for t in token_ids]
        cache = self.target.new_cache(1, len(ids))
        with torch.inference_mode():
            return self.target.forward_step(StepBatch.build([(0, ids, 0)], list(range(len(ids)))), cache).logits

    def stats_lines(self) -> list[str]:
        """The per-method statistics lines (cumulative over this LLM's lifetime)."""
        return self.engine.driver_stats_lines()
