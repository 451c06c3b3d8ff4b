"""Benchmark requests to any OpenAI-compatible server (specserve, llama-server, vLLM) over HTTP.

Streaming requests ask for `stream_options.include_usage`, so the usage (and, from specserve
and vLLM, `metrics.speculative_decoding`) arrives on the final chunk; llama-server-style
servers put `timings` on their last chunk. TTFT is the time to the first chunk that carries
generated text. A request is thread-safe to send from several workers at once.
"""
from __future__ import annotations

import json
import time

import httpx

from .results import TurnResult, turn_from_response

PATHS = {"chat": "/chat/completions", "completion": "/completions"}


def normalise_url(url: str) -> str:
    """`localhost:8080` -> `http://localhost:8080/v1` (as llama.cpp's client does)."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        message = body["error"]["message"] if isinstance(body.get("error"), dict) else body.get("error", body)
    except (ValueError, KeyError, TypeError, AttributeError):
        message = response.text[:500]
    return f"HTTP {response.status_code}: {message}"


class HttpTarget:
    def __init__(self, url: str, api_key: str | None = None, model: str | None = None, timeout: float = 600.0,
                 concurrency: int = 1):
        self.base = normalise_url(url)
        self.root = self.base[:-len("/v1")]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=max(concurrency, 1) + 2, max_keepalive_connections=max(concurrency, 1))
        self.client = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
                                   limits=limits)
        self.model = model

    def _get_json(self, url: str) -> dict | None:
        try:
            r = self.client.get(url, timeout=10)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def describe(self) -> dict:
        """What the server says about itself (best effort: another server may not answer /props)."""
        info = {"url": self.base}
        if self.model is None:
            models = self._get_json(self.base + "/models") or {}
            data = models.get("data") if isinstance(models, dict) else None
            if isinstance(data, list) and data and isinstance(data[0], dict):
                self.model = data[0].get("id")
        info["model"] = self.model
        props = self._get_json(self.root + "/props")
        if isinstance(props, dict):
            spec = props.get("speculative") or {}
            info["spec_types"] = spec.get("types") if isinstance(spec, dict) else None
            info["total_slots"] = props.get("total_slots")
        return info

    def send(self, body: dict, endpoint: str) -> TurnResult:
        if self.model is not None and "model" not in body:
            body = {"model": self.model, **body}
        url = self.base + PATHS[endpoint]
        t0 = time.perf_counter()
        try:
            if body.get("stream"):
                return self._stream(url, body, endpoint, t0)
            r = self.client.post(url, json=body)
            latency = time.perf_counter() - t0
            if r.status_code != 200:
                return TurnResult(latency=latency, error=error_text(r))
            data = r.json()
            if "error" in data:
                return TurnResult(latency=latency, error=f"server error: {data['error']}")
            choice = (data.get("choices") or [{}])[0]
            text = (choice.get("message") or {}).get("content") if endpoint == "chat" else choice.get("text")
            return turn_from_response(text or "", data.get("usage"), data.get("timings"), data.get("metrics"),
                                      choice.get("finish_reason"), latency, None)
        except httpx.HTTPError as exc:
            return TurnResult(latency=time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc or 'no detail'}")
        except ValueError as exc:        # a body that is not JSON
            return TurnResult(latency=time.perf_counter() - t0, error=f"bad response: {exc}")

    def _stream(self, url: str, body: dict, endpoint: str, t0: float) -> TurnResult:
        pieces, ttft, finish, done = [], None, None, False
        usage = timings = metrics = None
        with self.client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                r.read()
                return TurnResult(latency=time.perf_counter() - t0, error=error_text(r))
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    err = chunk["error"]
                    message = err.get("message", err) if isinstance(err, dict) else err
                    return TurnResult(latency=time.perf_counter() - t0, error=f"stream error: {message}")
                for choice in chunk.get("choices") or []:
                    delta = (choice.get("delta") or {}) if endpoint == "chat" else {"content": choice.get("text")}
                    text = delta.get("content") or ""
                    if ttft is None and (text or delta.get("reasoning_content")):
                        ttft = time.perf_counter() - t0
                    pieces.append(text)
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
                metrics = chunk.get("metrics") or metrics
        latency = time.perf_counter() - t0
        if not done and finish is None:
            return TurnResult(latency=latency, error="the stream ended before the response was complete")
        return turn_from_response("".join(pieces), usage, timings, metrics, finish, latency, ttft)

    def close(self) -> None:
        self.client.close()
