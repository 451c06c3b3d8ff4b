"""The engine: slots, continuous batching and the speculative step.

One `step()` runs ONE target forward for every active slot:
  1. the SpecDriver drafts for all generating slots at once;
  2. rows = [id_last, d_1..d_k] per generating slot + prompt chunks of new requests;
  3. target forward (logits for the rows that need them; the taps drafters read go to their store);
  4. the driver sees the batch (process), each slot verifies its draft, the cache is
     rolled back past rejected rows and the driver hears how many were accepted;
  5. emitted tokens go through EOS / stop-token / stop-string / length checks.
Requests join free slots and leave between steps. `add_request` and `abort` may be
called from other threads; `step` runs on one thread.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
import threading
import time

import numpy as np
import torch

from ..errors import ContextOverflowError, InvalidRequestError
from ..models.step_batch import StepBatch
from ..models.tokenizer import IncrementalDetokenizer, Tokenizer
from ..models.transformer import CausalLM
from ..penalties import adjust_logits
from ..sampling import make_generator
from ..speculative.base import Draft, DraftRequest, TargetBatch
from ..speculative.driver import NullDriver, SpecDriver
from ..speculative.verify import verify
from .request import Request, State, TokenLogprob
from .slot_choice import SlotChooser
from .stopping import StopChecker

log = logging.getLogger("specserve.engine")


@dataclass
class SlotWork:
    """One slot's part of a step: its draft, its first output row (-1: none, a prompt chunk with more to
    come) and, for a prompt chunk, where the chunk ends."""
    request: Request
    draft: Draft | None
    first_row: int
    chunk_end: int | None = None


class Engine:
    def __init__(self, target: CausalLM, tokenizer: Tokenizer | None, n_parallel: int = 1,
                 ctx_size: int = 0, n_batch: int = 512, driver: SpecDriver | None = None,
                 cache_types: tuple[str, str] = ("f32", "f32"), slot_prompt_similarity: float = 0.1):
        if n_parallel < 1:
            raise InvalidRequestError("n_parallel must be >= 1")
        self.target = target
        self.tokenizer = tokenizer
        self.ctx_size = ctx_size or target.config.max_position_embeddings
        self.n_batch = max(1, n_batch)
        self.n_parallel = n_parallel
        self.cache = target.new_cache(n_parallel, self.ctx_size, cache_types)
        self.device = target.device
        # StepBatch.build's device: None on the CPU, so it does not ask for every step
        self.batch_device = None if self.device.type == "cpu" else self.device
        self.driver = driver if driver is not None else NullDriver(n_parallel)
        self.slots: list[Request | None] = [None] * n_parallel
        self.slot_chooser = SlotChooser(n_parallel, slot_prompt_similarity)
        self.waiting: collections.deque[Request] = collections.deque()
        self.lock = threading.Lock()
        self.aborts_pending = False          # abort() flagged a request: the next step looks for it
        self.eos_ids = set(target.config.eos_token_ids)
        if tokenizer is not None and tokenizer.eos_token_id is not None and not self.eos_ids:
            self.eos_ids.add(tokenizer.eos_token_id)
        self.n_steps = 0
        self.verdicts_wanted = False         # this step asked the driver for drafts: it hears each verdict
        self.step_tokens = 0                 # tokens this step's generating slots emitted
        self.finish_listeners: list = []     # callback(request) when a request ends, on the step's thread

    # ------------------------------------------------------------------ queue
    def validate(self, request: Request) -> None:
        n = len(request.prompt_ids)
        if n == 0:
            raise InvalidRequestError("the prompt is empty")
        if n >= self.ctx_size:
            raise ContextOverflowError(
                f"the prompt has {n} tokens but the context size is {self.ctx_size} "
                f"(at most {self.ctx_size - 1} prompt tokens)")
        vocab = self.target.config.vocab_size
        bad = [t for t in request.prompt_ids if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(f"prompt token id {bad[0]} is outside the vocabulary (size {vocab})")
        request.params.validate()
        bad = [t for t in request.params.logit_bias if t >= vocab]
        if bad:
            raise InvalidRequestError(f"logit_bias token id {bad[0]} is outside the vocabulary (size {vocab})",
                                      param="logit_bias")

    def add_request(self, request: Request) -> None:
        self.validate(request)
        with self.lock:
            self.waiting.append(request)

    def abort(self, request_id: str) -> None:
        with self.lock:
            for req in list(self.waiting) + [r for r in self.slots if r is not None]:
                if req.request_id == request_id:
                    req.abort_requested = True
                    self.aborts_pending = True

    def has_work(self) -> bool:
        return bool(self.waiting) or any(r is not None for r in self.slots)

    @property
    def n_free_slots(self) -> int:
        return sum(r is None for r in self.slots)

    def _admit(self) -> None:
        with self.lock:
            while self.waiting:
                free = [slot for slot, r in enumerate(self.slots) if r is None]
                if not free:
                    break
                req = self.waiting.popleft()
                if req.abort_requested:
                    self._finish(req, "abort")
                    continue
                slot = self.slot_chooser.choose(free, np.asarray(req.prompt_ids, dtype=np.int64))
                req.slot = slot
                req.state = State.PREFILL
                req.t_start = time.perf_counter()
                req.tokens = np.zeros(self.ctx_size + 1, dtype=np.int64)
                req.tokens[:len(req.prompt_ids)] = req.prompt_ids
                req.n_cached = 0
                req.generator, req.seed = make_generator(req.params.seed)
                req.detok = IncrementalDetokenizer(self.tokenizer) if self.tokenizer else None
                req.stopper = StopChecker(req.params.stop)
                # nobody reads the text before the end: decode it once then, not token by token
                req.lazy_text = req.on_update is None and not req.params.stop
                if req.params.logprobs is not None:
                    req.logprobs = []
                self.cache.clear(slot)
                self.slots[slot] = req

    def _handle_aborts(self) -> None:
        with self.lock:
            self.aborts_pending = False
            aborted = [r for r in self.waiting if r.abort_requested]
            for r in aborted:
                self.waiting.remove(r)
        for r in aborted:
            self._finish(r, "abort")
        for r in list(self.slots):
            if r is not None and r.abort_requested:
                self._finish(r, "abort")

    # ------------------------------------------------------------------ step
    def step(self) -> bool:
        """Run one iteration; returns False when there was nothing to do."""
        # (read without the lock: a request added or aborted meanwhile is seen by the next step)
        if self.aborts_pending:
            self._handle_aborts()
        if self.waiting:
            self._admit()
        active = [r for r in self.slots if r is not None]
        if not active:
            return False
        try:
            if torch.is_inference_mode_enabled():     # the server's engine thread stays in inference mode
                self._run(active)
            else:
                with torch.inference_mode():
                    self._run(active)
        except Exception as exc:   # one bad step must not take the engine down
            log.exception("step failed")
            for r in active:
                if not r.finished:
                    self._finish(r, "error", error=f"internal error: {type(exc).__name__}: {exc}")
        self.n_steps += 1
        return True

    def _run(self, active: list[Request]) -> None:
        """One step, as the algorithm reads: draft, one target forward over every slot's rows, verify
        each slot and commit what it keeps."""
        t_start = time.perf_counter()
        generating = [r for r in active if r.state == State.GENERATING]
        self.step_tokens = 0
        drafts = self._draft(generating)
        work, batch, prompt_slots = self._plan(active, drafts)
        out = self.target.forward_step(batch, self.cache, store=self.driver.store)
        if self.driver.processors:
            self.driver.process(TargetBatch(batch, out, prompt_slots))
        self._commit(work, out)
        if generating:
            self.driver.step_done(time.perf_counter() - t_start, batch.n_tokens, self.step_tokens,
                                  any(r.finished for r in generating))

    def _draft(self, generating: list[Request]) -> dict[int, Draft]:
        """Drafts for the generating slots, each capped by its context and max_tokens."""
        self.verdicts_wanted = not self.driver.skips_drafting(len(generating))
        if not self.verdicts_wanted:
            return {}
        requests, sampled_drafts = [], self.driver.caps[1] > 0
        for r in generating:
            if r.params.temperature > 0 and not sampled_drafts:     # --spec-draft-n-max-sampled 0
                continue
            n_max = self.ctx_size - r.n_cached - 2
            if r.params.max_tokens is not None:
                n_max = min(n_max, r.params.max_tokens - len(r.output_ids) - 1)
            if n_max > 0:
                p = r.params
                requests.append(DraftRequest(r.slot, n_max, r.n_cached, r.id_last, r.tokens[:r.n_cached],
                                             p.temperature, r.generator, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p))
        drafts = self.driver.draft(requests) if requests else {}
        for slot, d in drafts.items():
            self.slots[slot].draft_stats.n_draft_tokens += len(d.tokens)
        return drafts

    def _plan(self, active: list[Request], drafts: dict[int, Draft]) -> tuple[list[SlotWork], StepBatch, dict]:
        """The step's rows: [id_last, drafts...] per generating slot, then prompt chunks within n_batch; and
        {slot: True} for the slots whose rows are a prompt chunk."""
        work, rows, outputs, n_rows, budget, prompt_slots = [], [], [], 0, self.n_batch, {}
        for r in active:
            if r.state != State.GENERATING:
                continue
            draft = drafts.get(r.slot)
            ids = [r.id_last] + (draft.tokens if draft else [])
            work.append(SlotWork(r, draft, len(outputs)))
            outputs.extend(range(n_rows, n_rows + len(ids)))
            rows.append((r.slot, ids, r.n_cached))
            n_rows += len(ids)
            budget -= len(ids)
        for r in active:
            if r.state != State.PREFILL or (budget <= 0 and rows):
                continue
            end = min(len(r.prompt_ids), r.n_cached + max(budget, 1))
            ids = r.prompt_ids[r.n_cached:end]
            last_chunk = end == len(r.prompt_ids)
            work.append(SlotWork(r, None, len(outputs) if last_chunk else -1, chunk_end=end))
            if last_chunk:
                outputs.append(n_rows + len(ids) - 1)
            rows.append((r.slot, ids, r.n_cached))
            prompt_slots[r.slot] = True
            n_rows += len(ids)
            budget -= len(ids)
        return work, StepBatch.build(rows, outputs, device=self.batch_device), prompt_slots

    def _commit(self, work: list[SlotWork], out) -> None:
        """Verify every slot that has output rows and keep what it emits; a failure ends that request alone."""
        logits = out.logits
        argmax = None
        if logits is not None and any(w.request.params.greedy for w in work):
            argmax = (out.argmax if out.argmax is not None else logits.argmax(dim=-1)).tolist()
        for w in work:
            r = w.request
            if r.finished:
                continue
            if w.chunk_end is not None:
                r.n_cached = w.chunk_end
                if w.first_row < 0:                 # a prompt chunk with more to come
                    continue
            try:
                draft = w.draft.tokens if w.draft else []
                rows, first, greedy = logits, w.first_row, argmax
                if r.params.adjusts_logits:
                    rows = adjust_logits(logits[first:first + len(draft) + 1], r.params, r.prompt_ids,
                                         r.output_ids, draft)
                    first, greedy = 0, None
                emitted = verify(rows, draft, w.draft.q_probs if w.draft else None, r.params, r.generator,
                                 greedy, first)
                if w.chunk_end is None:
                    self._advance(r, draft, emitted)
                else:
                    self._start_generating(r, emitted[0])
                self._emit(r, emitted, logits, w.first_row)
            except Exception as exc:
                log.exception("request %s failed", r.request_id)
                self._finish(r, "error", error=f"internal error: {type(exc).__name__}: {exc}")

    def _advance(self, r: Request, draft: list[int], emitted: list[int]) -> None:
        """Keep id_last and the accepted drafts in the cache (the rest is rolled back) and tell the driver."""
        n_acc = len(emitted) - 1
        self.step_tokens += len(emitted)
        self.cache.truncate(r.slot, r.n_cached + 1 + n_acc)
        r.tokens[r.n_cached] = r.id_last
        r.tokens[r.n_cached + 1:r.n_cached + 1 + n_acc] = emitted[:n_acc]
        r.n_cached += 1 + n_acc
        r.id_last = emitted[-1]
        if draft:
            r.draft_stats.record(len(draft), n_acc)
        if self.verdicts_wanted:
            self.driver.verified(r.slot, len(draft), n_acc, emitted[0])

    def _start_generating(self, r: Request, token: int) -> None:
        """The prompt is in the cache and its last row gave the first token."""
        r.state = State.GENERATING
        r.t_first_token = time.perf_counter()
        r.id_last = token
        self.driver.begin(r.slot, r.tokens[:r.n_cached], sampled=r.params.temperature > 0)

    # ------------------------------------------------------------------ output
    def _emit(self, r: Request, tokens: list[int], logits: torch.Tensor, first_row: int) -> None:
        """Append the tokens (whose logits are rows first_row.. of `logits`) and check for the end."""
        params = r.params
        if r.logprobs is not None:
            self._record_logprobs(r, tokens, logits[first_row:first_row + len(tokens)])
        finish = None
        for tok in tokens:
            r.output_ids.append(tok)
            if tok in self.eos_ids and not params.ignore_eos:
                finish, reason = "stop", tok
                break
            if tok in params.stop_token_ids:
                finish, reason = "stop", tok
                break
            if r.detok is not None and not r.lazy_text:
                hit = r.stopper.push(r, r.detok.push([tok]))
                if hit is not None:
                    finish, reason = "stop", hit
                    break
            if params.max_tokens is not None and len(r.output_ids) >= params.max_tokens:
                finish, reason = "length", None
                break
        if finish is None and r.n_cached + 1 >= self.ctx_size:
            finish, reason = "length", None
        if finish is not None:
            self._finish(r, finish, stop_reason=reason)
        elif r.on_update is not None:
            r.on_update(r.snapshot())

    def _record_logprobs(self, r: Request, tokens: list[int], logits_rows: torch.Tensor) -> None:
        logp = torch.log_softmax(logits_rows.float(), dim=-1)
        n_top = r.params.logprobs or 0
        for i, tok in enumerate(tokens):
            top = []
            if n_top:
                values, ids = torch.topk(logp[i], n_top)
                top = list(zip(ids.tolist(), values.tolist()))
            r.logprobs.append(TokenLogprob(tok, float(logp[i, tok]), top))

    def _finish(self, r: Request, reason: str, stop_reason=None, error: str | None = None) -> None:
        if r.finished:
            return
        if r.detok is not None and r.lazy_text:
            stopped_by_token = reason == "stop" and isinstance(stop_reason, int)
            r.text += r.detok.push(r.output_ids[:-1] if stopped_by_token else r.output_ids)
        if r.detok is not None and reason != "stop":
            r.text += r.detok.flush()
        if r.logprobs is not None:
            del r.logprobs[len(r.output_ids):]
        r.state = State.FINISHED
        r.finish_reason = reason
        r.stop_reason = stop_reason
        r.error = error
        r.t_end = time.perf_counter()
        if not r.t_first_token:
            r.t_first_token = r.t_end
        if 0 <= r.slot < self.n_parallel and self.slots[r.slot] is r:
            self.slots[r.slot] = None
            self.slot_chooser.release(r.slot, r.tokens[:r.n_cached])
            self.cache.clear(r.slot)
            self.driver.release(r.slot)
        for listener in self.finish_listeners:
            listener(r)
        if r.on_update is not None:
            r.on_update(r.snapshot())

    # ------------------------------------------------------------------ statistics
    def request_stats_lines(self, r: Request) -> list[str]:
        return r.draft_stats.lines(self.driver.max_draft())

    def driver_stats_lines(self) -> list[str]:
        return self.driver.stats_lines()
