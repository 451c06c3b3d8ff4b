"""Prometheus metrics under llama-server's (`llamacpp:`) and vLLM's (`vllm:`) names.

Counters are updated once per finished request, on the engine thread, from the request's
own statistics, so they reconcile exactly with the per-request `timings` and
`metrics.speculative_decoding` objects. Gauges read the engine's state when scraped.
Each app gets its own CollectorRegistry.
"""
from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .. import kernels
from ..engine.engine import Engine
from ..engine.request import Request

# both projects expose counters without the extra `_created` series
prometheus_client.disable_created_metrics()

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


class ServerMetrics:
    def __init__(self, engine: Engine, model_name: str):
        self.registry = registry = CollectorRegistry()
        self.model_name = model_name
        vllm = {"labelnames": ["model_name"], "registry": registry}

        def llama_counter(name, doc):
            return Counter(f"llamacpp:{name}", doc, registry=registry)

        # llama-server names
        self.prompt_tokens = llama_counter("prompt_tokens", "Number of prompt tokens processed.")
        self.prompt_seconds = llama_counter("prompt_seconds", "Prompt process time.")
        self.tokens_predicted = llama_counter("tokens_predicted", "Number of generation tokens processed.")
        self.predicted_seconds = llama_counter("tokens_predicted_seconds", "Predict process time.")
        self.spec_draft_tokens = llama_counter("spec_decode_num_draft_tokens", "Number of draft tokens generated.")
        self.spec_accepted_tokens = llama_counter("spec_decode_num_accepted_tokens",
                                                  "Number of draft tokens accepted.")
        self.spec_drafts = llama_counter("spec_decode_num_drafts", "Number of verification steps with a draft.")
        self.spec_accepted_per_pos = Counter("llamacpp:spec_decode_num_accepted_tokens_per_pos",
                                             "Accepted draft tokens at each draft position.", ["position"],
                                             registry=registry)
        # running totals for the throughput gauges (prometheus counters are write-only)
        self.totals = {"prompt_tokens": 0, "prompt_s": 0.0, "predicted_tokens": 0, "predicted_s": 0.0}
        Gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.", registry=registry
              ).set_function(lambda: _ratio(self.totals["prompt_tokens"], self.totals["prompt_s"]))
        Gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.", registry=registry
              ).set_function(lambda: _ratio(self.totals["predicted_tokens"], self.totals["predicted_s"]))
        Gauge("llamacpp:requests_processing", "Number of requests processing.", registry=registry
              ).set_function(lambda: engine.n_parallel - engine.n_free_slots)
        Gauge("llamacpp:requests_deferred", "Number of requests deferred.", registry=registry
              ).set_function(lambda: len(engine.waiting))
        if engine.target.native is not None:       # specserve's own: is another process taking our cores?
            Gauge("specserve:kernel_jobs", "Parallel jobs run by the native kernels' thread pool.",
                  registry=registry).set_function(lambda: kernels.pool_stats()["jobs"])
            Gauge("specserve:kernel_solo_jobs", "Jobs the pool ran on one thread because another process was "
                  "taking a core (a busy neighbour).", registry=registry
                  ).set_function(lambda: kernels.pool_stats()["solo_jobs"])

        # vLLM names
        running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", **vllm)
        running.labels(model_name).set_function(lambda: engine.n_parallel - engine.n_free_slots)
        waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", **vllm)
        waiting.labels(model_name).set_function(lambda: len(engine.waiting))
        self.v_prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", **vllm)
        self.v_generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                           **vllm)
        self.v_success = Counter("vllm:request_success", "Count of finished requests.",
                                 ["model_name", "finished_reason"], registry=registry)
        self.v_e2e = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency in seconds.",
                               buckets=E2E_BUCKETS, **vllm)
        self.v_ttft = Histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.",
                                buckets=TTFT_BUCKETS, **vllm)
        self.v_tpot = Histogram("vllm:request_time_per_output_token_seconds",
                                "Mean time per output token of each request, in seconds.",
                                buckets=TPOT_BUCKETS, **vllm)
        self.v_queue = Histogram("vllm:request_queue_time_seconds", "Time spent waiting for a slot, in seconds.",
                                 buckets=TTFT_BUCKETS, **vllm)
        self.v_drafts = Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", **vllm)
        self.v_draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", **vllm)
        self.v_accepted_tokens = Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                                         **vllm)
        self.v_accepted_per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                          "Accepted tokens per draft position.", ["model_name", "position"],
                                          registry=registry)
        for metric in (self.v_prompt_tokens, self.v_generation_tokens, self.v_e2e, self.v_ttft, self.v_tpot,
                       self.v_queue, self.v_drafts, self.v_draft_tokens, self.v_accepted_tokens):
            metric.labels(model_name)     # show up from the start, at 0
        if engine.driver.enabled:
            for pos in range(min(engine.driver.max_draft(), 64)):
                self.spec_accepted_per_pos.labels(str(pos))
                self.v_accepted_per_pos.labels(model_name, str(pos))

    def observe_finished(self, r: Request) -> None:
        """Count one finished request (called on the engine thread)."""
        name = self.model_name
        n_prompt, n_out = len(r.prompt_ids), len(r.output_ids)
        self.v_success.labels(name, r.finish_reason or "abort").inc()
        if not r.t_start:         # aborted while still waiting for a slot
            return
        t = r.timings()
        self.prompt_tokens.inc(n_prompt)
        self.prompt_seconds.inc(t.prompt_ms / 1000)
        self.tokens_predicted.inc(n_out)
        self.predicted_seconds.inc(t.predicted_ms / 1000)
        totals = self.totals
        totals["prompt_tokens"] += n_prompt
        totals["prompt_s"] += t.prompt_ms / 1000
        totals["predicted_tokens"] += n_out
        totals["predicted_s"] += t.predicted_ms / 1000
        self.v_prompt_tokens.labels(name).inc(n_prompt)
        self.v_generation_tokens.labels(name).inc(n_out)
        self.v_queue.labels(name).observe(t.queue_ms / 1000)
        if r.finish_reason in ("stop", "length"):
            self.v_e2e.labels(name).observe(r.t_end - r.t_arrival)
            self.v_ttft.labels(name).observe(r.t_first_token - r.t_arrival)
            if n_out > 1:
                self.v_tpot.labels(name).observe((r.t_end - r.t_first_token) / (n_out - 1))
        stats = r.draft_stats
        if stats.n_draft_tokens or stats.n_verify_steps:
            self.spec_draft_tokens.inc(stats.n_draft_tokens)
            self.spec_accepted_tokens.inc(stats.n_draft_accepted)
            self.spec_drafts.inc(stats.n_verify_steps)
            self.v_draft_tokens.labels(name).inc(stats.n_draft_tokens)
            self.v_accepted_tokens.labels(name).inc(stats.n_draft_accepted)
            self.v_drafts.labels(name).inc(stats.n_verify_steps)
            for pos, count in enumerate(stats.accepted_per_pos):
                self.spec_accepted_per_pos.labels(str(pos)).inc(count)
                self.v_accepted_per_pos.labels(name, str(pos)).inc(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0
