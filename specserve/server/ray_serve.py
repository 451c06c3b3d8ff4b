"""specserve replicas behind Ray Serve (`specserve serve-ray`, the optional `ray` extra).

Each replica is a whole `specserve serve`: its own engine, slots and spec settings, and the same
FastAPI app (OpenAI and llama-server routes, streaming, per-request spec metrics), built inside the
replica process. Ray Serve's HTTP proxy routes to the replicas:

  * requests with a session hint (the `X-Session-ID` header, or the one --session-header names) go
    to the replica that rendezvous hashing ranks first for that session, so the replica's n-gram
    state and caches keep serving the same conversation; when it is gone the next one takes over;
  * other requests take Ray Serve's usual choice: the shorter queue of two random replicas.

Metrics: each replica pushes its Prometheus text to a small named actor every second; `/metrics`
answers the sum over the live replicas, `/metrics/replicas` every replica's series with a
`replica` label. Every response names its replica in the `X-Specserve-Replica` header.
"""
from __future__ import annotations

import hashlib
import pickle
import random
import threading
import time
from collections import defaultdict

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

SESSION_HEADER = "X-Session-ID"
REPLICA_HEADER = b"x-specserve-replica"
METRICS_ACTOR = "specserve-metrics"
METRICS_NAMESPACE = "specserve"
PUSH_EVERY_S = 1.0
STALE_AFTER_S = 5.0          # a replica that has not pushed for this long is gone


def session_of(pending: PendingRequest | None, header: str) -> str | None:
    """The session hint of a request coming from the HTTP proxy, if it carries one."""
    if pending is None:
        return None
    name = header.lower().encode()
    for arg in pending.args:
        if isinstance(arg, bytes):          # the proxy sends its request object pickled
            try:
                arg = pickle.loads(arg)
            except Exception:               # not a request object: no hint
                continue
        scope = getattr(arg, "asgi_scope", None)
        if isinstance(scope, dict):
            for key, value in scope.get("headers", []):
                if key.lower() == name and value:
                    return value.decode("latin-1")
    return None


def rendezvous_order(session: str, replicas: list[RunningReplica]) -> list[RunningReplica]:
    """Replicas ranked by a hash of (session, replica): stable while the replica lives, and only the
    sessions of a lost replica move."""
    def score(replica: RunningReplica) -> bytes:
        return hashlib.sha1(f"{session}|{replica.replica_id.unique_id}".encode()).digest()
    return sorted(replicas, key=score, reverse=True)


class SessionAffinityRouter(RequestRouter):
    """Session hint: the replicas in rendezvous order, one rank each (the first that accepts wins).
    No hint: two random replicas in one rank, the shorter queue wins (power of two choices)."""

    def initialize_state(self, session_header: str = SESSION_HEADER, **_):
        self.session_header = session_header

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        session = session_of(pending_request, getattr(self, "session_header", SESSION_HEADER))
        if session is not None:
            return [[replica] for replica in rendezvous_order(session, candidate_replicas)]
        return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]


@ray.remote(num_cpus=0)
class MetricsBoard:
    """The replicas' latest Prometheus texts."""

    def __init__(self):
        self.texts: dict[str, tuple[float, str]] = {}

    def push(self, replica: str, text: str) -> None:
        self.texts[replica] = (time.time(), text)

    def live(self) -> dict[str, str]:
        now = time.time()
        self.texts = {k: v for k, v in self.texts.items() if now - v[0] < STALE_AFTER_S}
        return {k: text for k, (_, text) in self.texts.items()}


def combine(texts: dict[str, str], per_replica: bool) -> str:
    """Prometheus exposition text: every series summed over the replicas, or each replica's series
    with a `replica` label."""
    from prometheus_client.parser import text_string_to_metric_families
    heads: dict[str, str] = {}
    values: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            heads.setdefault(family.name, f"# HELP {family.name} {family.documentation}\n"
                                          f"# TYPE {family.name} {family.type}")
            for sample in family.samples:
                labels = dict(sample.labels, **({"replica": replica} if per_replica else {}))
                values[family.name][(sample.name, tuple(sorted(labels.items())))] += sample.value
    lines = []
    for name, head in heads.items():
        lines.append(head)
        for (sample, labels), value in values[name].items():
            body = ",".join(f'{k}="{_escaped(v)}"' for k, v in labels)
            lines.append(f"{sample}{{{body}}} {value!r}" if body else f"{sample} {value!r}")
    return "\n".join(lines) + "\n"


def _escaped(label_value: str) -> str:
    return label_value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def replica_app(app, metrics_render, replica: str, board, api_keys: list[str]):
    """The specserve app with the replica's name on every response and the cluster-wide metric routes
    (behind the same API key check as every other route)."""
    from starlette.responses import PlainTextResponse

    from .app import ApiKeyMiddleware

    async def wrapped(scope, receive, send):
        if scope["type"] == "http" and scope["path"] in ("/metrics", "/metrics/replicas") and metrics_render:
            board.push.remote(replica, metrics_render().decode())
            texts = await board.live.remote()
            texts[replica] = metrics_render().decode()
            body = combine(texts, per_replica=scope["path"] == "/metrics/replicas")
            response = PlainTextResponse(body, media_type="text/plain; version=0.0.4; charset=utf-8",
                                         headers={"X-Specserve-Replica": replica})
            return await response(scope, receive, send)

        async def named_send(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []), (REPLICA_HEADER, replica.encode())])
            await send(message)
        return await app(scope, receive, named_send if scope["type"] == "http" else send)

    return ApiKeyMiddleware(wrapped, keys=api_keys)


@serve.ingress()
class SpecserveReplica:
    """One engine with its slots, serving the specserve app inside a Ray Serve replica."""

    def __init__(self, args):
        from ..commands.serve import load_served
        self.engine, self.tokenizer, self.settings = load_served(args)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.board = MetricsBoard.options(name=METRICS_ACTOR, namespace=METRICS_NAMESPACE, get_if_exists=True,
                                          lifetime="detached").remote()

    def __serve_build_asgi_app__(self):
        from .app import create_app
        app = create_app(self.engine, self.tokenizer, self.settings)
        render = app.state.generation.metrics.render if self.settings.metrics else None
        if render is not None:
            threading.Thread(target=self._push_metrics, args=(render,), daemon=True).start()
        return replica_app(app, render, self.replica, self.board, self.settings.api_keys)

    def _push_metrics(self, render) -> None:
        while True:
            self.board.push.remote(self.replica, render().decode())
            time.sleep(PUSH_EVERY_S)


def deployment(args, replicas: int, session_header: str = SESSION_HEADER):
    """The bound Ray Serve application: `replicas` copies of SpecserveReplica(args)."""
    router = RequestRouterConfig(request_router_class=SessionAffinityRouter,
                                 request_router_kwargs={"session_header": session_header})
    cls = serve.deployment(SpecserveReplica, name="specserve", num_replicas=replicas,
                           max_ongoing_requests=max(64, 4 * args.parallel), request_router_config=router,
                           ray_actor_options={"num_cpus": 0})
    return cls.bind(args)
