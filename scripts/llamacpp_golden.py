"""Golden data from the real llama.cpp: what llama-server generates and drafts, request by request,
over one fixed session of requests per speculative type. tests/test_llamacpp_golden.py replays the
session in specserve and asserts the same text and the same per-request draft counters.

The session: eight requests from the bundled `qualitative` prompt set (code, code editing, a
three-turn conversation, a question, a summary), sent one after another to ONE llama-server with one
slot, so each n-gram method's per-slot state carries from request to request as it does in a
server. The order covers every way a new prompt relates to what the slot saw before: shorter than
the last prompt, continuing the conversation, unrelated and longer than the whole last request,
unrelated and between the two. A later turn of the conversation is sent as a completions client
sends it: earlier prompt, reply, newline, new message (specserve/bench/samples.py).

The n-gram types whose per-slot state outlives a request are also run with two slots (`-np 2`), where
llama-server picks each request's slot by prompt similarity, then least recently used: the file
records the slot (`id_slot`) and the counters of every request.

Each server: the bundled model as an f32 GGUF, `-t 1 -np 1 -c 1024 --no-warmup`; each request:
greedy, 128 tokens, EOS ignored, no prompt cache. Types: every draftless one (ngram-cache also with
a static cache that llama-lookup-create builds from the prompt set's text), and the drafters
draft-simple, DFlash and DSpark with their GGUFs. The session's prompts and replies come from a run
without speculation; every other run must reproduce that text, and a request where llama.cpp's
output differed would be recorded with its own text. The drafter runs add `-v`, and their log gives
each request's drafts and near-ties (two best candidates within NEAR_TIE in probability), which the
test needs where float32 noise makes specserve's drafter choose the other candidate.

Regenerate the golden file whenever behaviour changes on purpose (a method, the bundled model or a
drafter, or the session or settings below), then run the test:

    LLAMACPP_BIN=/path/to/llama.cpp/build/bin GGUF_DIR=/path/to/gguf \\
        .venv/bin/python scripts/llamacpp_golden.py [--out tests/data/llamacpp_golden.json]
    .venv/bin/python -m pytest -m "" tests/test_llamacpp_golden.py

LLAMACPP_BIN holds llama-server and llama-lookup-create; GGUF_DIR holds stdlib-coder-f32.gguf and
the drafters' stdlib-coder-{draft,dflash,dspark}-f32.gguf (docs/llamacpp.md says how to convert them).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from serve_process import LlamaServerProcess  # noqa: E402
from specserve.bench.samples import completion_prompt, load_bundled  # noqa: E402
from specserve.speculative.ngram_cache_store import NgramCache  # noqa: E402

PROMPT_SET = "qualitative"
# (question id, turn): a later turn continues the conversation of the request before it
SESSION = [("code_editing-01", 0), ("multi_turn-03", 0), ("multi_turn-03", 1), ("multi_turn-03", 2),
           ("qa-01", 0), ("code_editing-02", 0), ("code_editing-03", 0), ("summarization-01", 0)]
MODEL_GGUF = "stdlib-coder-f32.gguf"
SERVER_ARGS = ["-t", "1", "-np", "1", "-c", "1024", "--no-warmup"]
REQUEST = {"n_predict": 128, "temperature": 0, "ignore_eos": True, "cache_prompt": False, "return_tokens": True}
STATIC_CACHE = "{static_cache}"       # stands for the static cache file in the arguments below
# a drafter's choice between two candidates whose probabilities differ by no more than this (llama-server
# logs them to 3 decimals) is numerical noise: another implementation may pick the other one
NEAR_TIE = 0.002
CANDIDATE = re.compile(r"draft candidate +(\d+), pos +(\d+): +(-?\d+) \( *([-\d.]+)\)")

# name, llama-server arguments ({gguf} = GGUF_DIR), and the specserve settings that must reproduce them:
# spec type, bundled drafter folder, options (LLM keyword arguments). The n-gram types run with the options
# that restore llama.cpp's behaviour where specserve's default differs (docs/ngram.md).
CONFIGS = [
    ("ngram-simple", ["--spec-type", "ngram-simple"], ("ngram-simple", None, {})),
    ("ngram-map-k", ["--spec-type", "ngram-map-k"], ("ngram-map-k", None, {"spec_ngram_map_k_begin": "trust"})),
    ("ngram-map-k4v", ["--spec-type", "ngram-map-k4v"],
     ("ngram-map-k4v", None, {"spec_ngram_map_k4v_begin": "trust", "spec_ngram_map_k4v_draft": "latest"})),
    # short keys and values: continuations compete, so k4v's vote and which tokens it copies matter
    ("ngram-map-k4v n=2 m=3",
     ["--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-n", "2", "--spec-ngram-map-k4v-size-m", "3"],
     ("ngram-map-k4v", None, {"spec_ngram_map_k4v_size_n": 2, "spec_ngram_map_k4v_size_m": 3,
                              "spec_ngram_map_k4v_begin": "trust", "spec_ngram_map_k4v_draft": "latest"})),
    ("ngram-mod", ["--spec-type", "ngram-mod"], ("ngram-mod", None, {})),
    ("ngram-cache", ["--spec-type", "ngram-cache"], ("ngram-cache", None, {"spec_ngram_cache_context": "slot"})),
    ("ngram-cache + static cache", ["--spec-type", "ngram-cache", "-lcs", STATIC_CACHE],
     ("ngram-cache", None, {"spec_ngram_cache_context": "slot", "lookup_cache_static": STATIC_CACHE})),
    ("draft-simple", ["--spec-type", "draft-simple", "-md", "{gguf}/stdlib-coder-draft-f32.gguf",
                      "--spec-draft-n-max", "3"],
     ("draft-simple", "stdlib-coder-draft", {"spec_draft_n_max": 3})),
    # llama.cpp's draft-dflash expects the bonus-anchor block; the anchor-first DFlash drafter runs as draft-dspark
    ("draft-dflash", ["--spec-type", "draft-dspark", "-md", "{gguf}/stdlib-coder-dflash-f32.gguf",
                      "--spec-draft-n-max", "8"],
     ("draft-dflash", "stdlib-coder-dflash", {"spec_draft_n_max": 8})),
    ("draft-dspark", ["--spec-type", "draft-dspark", "-md", "{gguf}/stdlib-coder-dspark-f32.gguf",
                      "--spec-draft-n-max", "8"],
     ("draft-dspark", "stdlib-coder-dspark", {"spec_draft_n_max": 8})),
]


# configurations (names above) also run with two slots: which slot a request takes decides which state it meets
TWO_SLOTS = ["ngram-map-k", "ngram-map-k4v n=2 m=3", "ngram-cache"]


def compact_json(data, depth: int = 0) -> str:
    """Indented JSON where anything short, and every list of numbers or of lists of numbers (token ids,
    drafts), stays on one line, so the file stays small and its diffs readable."""
    flat = json.dumps(data)
    if len(flat) <= 100 or _numeric(data) or not isinstance(data, (dict, list)):
        return flat
    pad = " " * (depth + 1)
    if isinstance(data, dict):
        items = [f"{pad}{json.dumps(k)}: {compact_json(v, depth + 1)}" for k, v in data.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    items = [pad + compact_json(v, depth + 1) for v in data]
    return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"


def _numeric(data) -> bool:
    """A list of numbers, or of such lists (token ids, drafts)."""
    return isinstance(data, list) and all(isinstance(x, (int, float)) or _numeric(x) for x in data)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def static_corpus() -> str:
    """The static cache's text: every turn of the prompt set, one after another."""
    return "\n".join(turn for sample in load_bundled(PROMPT_SET) for turn in sample.turns)


def llama_version(bin_dir: Path) -> str:
    out = subprocess.run([str(bin_dir / "llama-server"), "--version"], capture_output=True, text=True)
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.startswith(("version", "built"))]
    if not lines:
        raise SystemExit(f"{bin_dir / 'llama-server'} --version printed no version")
    return "; ".join(lines)


def build_static_cache(bin_dir: Path, model: Path, scratch: Path) -> tuple[Path, dict]:
    corpus = scratch / "corpus.txt"
    corpus.write_text(static_corpus(), encoding="utf-8")
    out = scratch / "static.bin"
    run = subprocess.run([str(bin_dir / "llama-lookup-create"), "-m", str(model), "-f", str(corpus),
                          "-lcs", str(out)], capture_output=True, text=True)
    if run.returncode != 0 or not out.is_file():
        raise SystemExit(f"llama-lookup-create failed:\n{run.stderr[-2000:]}")
    return out, {"corpus": f"the turns of the {PROMPT_SET} prompt set joined by newlines, read with -f",
                 "placeholder": STATIC_CACHE, "ngrams": len(NgramCache.load(out)), "sha256": sha256(out)}


class Server(LlamaServerProcess):
    def __enter__(self) -> "Server":
        error = self.wait(warm_up=False)        # a warm-up request would leave state in the slot
        if error:
            self.stop()
            raise SystemExit(f"llama-server did not start: {error} (log: {self.log_path})")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def complete(self, client: httpx.Client, prompt: str) -> dict:
        response = client.post(self.url + "/completion", json={"prompt": prompt, **REQUEST})
        response.raise_for_status()
        return response.json()

    def tokenize(self, client: httpx.Client, text: str) -> list[int]:
        response = client.post(self.url + "/tokenize", json={"content": text, "add_special": True,
                                                              "parse_special": True})
        response.raise_for_status()
        return response.json()["tokens"]


def build_session(bin_dir: Path, model: Path, logs: Path) -> list[dict]:
    """The session's prompts and replies, from llama-server without speculation."""
    samples = {s.question_id: s for s in load_bundled(PROMPT_SET)}
    session, conversation = [], ""
    with Server(bin_dir, model, SERVER_ARGS, logs / "llama-none.log") as server, httpx.Client(timeout=600) as client:
        for question_id, turn in SESSION:
            prompt = completion_prompt(conversation if turn else "", samples[question_id].turns[turn])
            reply = server.complete(client, prompt)
            session.append({"question_id": question_id, "turn": turn, "prompt": prompt,
                            "prompt_tokens": server.tokenize(client, prompt),
                            "text": reply["content"], "tokens": reply["tokens"]})
            conversation = prompt + reply["content"]
    return session


def logged_drafts(log_text: str) -> list[dict]:
    """Per request, from llama-server's -v log: the drafter's drafts (its top token at each position it
    logged) and its near-ties (positions where the two top candidates' logged probabilities differ by at
    most NEAR_TIE: [draft, position, top token, its p, runner-up, its p])."""
    requests, top = [], None
    for line in log_text.splitlines():
        if "new prompt" in line:
            requests.append({"drafts": [], "near_ties": []})
            continue
        found = CANDIDATE.search(line)
        if not found or not requests:
            continue
        rank, pos, token, p = int(found[1]), int(found[2]), int(found[3]), float(found[4])
        drafts = requests[-1]["drafts"]
        if rank == 0:
            if pos == 0:
                drafts.append([])
            drafts[-1].append(token)
            top = (token, p)
        elif rank == 1 and top[1] - p <= NEAR_TIE:
            requests[-1]["near_ties"].append([len(drafts) - 1, pos, top[0], top[1], token, p])
    return requests


def run_config(bin_dir: Path, model: Path, args: list[str], session: list[dict], log: Path,
               with_drafts: bool, slots: int = 1) -> list[dict]:
    """Per request: llama-server's draft counters, its text where it differs from the session's, with
    several slots the slot it took, and with with_drafts (a model drafter) the drafts and near-ties its -v
    log shows."""
    requests = []
    args = args + ["-v"] if with_drafts else args
    server_args = [str(slots) if i and SERVER_ARGS[i - 1] == "-np" else a for i, a in enumerate(SERVER_ARGS)]
    with Server(bin_dir, model, server_args + args, log) as server, httpx.Client(timeout=600) as client:
        for expected in session:
            reply = server.complete(client, expected["prompt"])
            timings = reply["timings"]
            record = {"draft_n": timings.get("draft_n", 0), "draft_n_accepted": timings.get("draft_n_accepted", 0)}
            if slots > 1:
                record["id_slot"] = reply["id_slot"]
            if reply["content"] != expected["text"] or reply["tokens"] != expected["tokens"]:
                record.update(text=reply["content"], tokens=reply["tokens"])
                print(f"  note: llama.cpp's output of request {len(requests)} differs from the run without "
                      "speculation; recorded", file=sys.stderr)
            requests.append(record)
    if with_drafts:
        logged = logged_drafts(log.read_text(errors="replace"))
        if len(logged) != len(requests):
            raise SystemExit(f"{log}: found {len(logged)} requests in the log, sent {len(requests)}")
        for record, drafts in zip(requests, logged):
            record.update(drafts)
    return requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "llamacpp_golden.json")
    parser.add_argument("--logs", type=Path, default=ROOT / "runs" / "llamacpp_golden",
                        help="folder for the servers' logs")
    args = parser.parse_args()
    bin_dir = Path(os.environ.get("LLAMACPP_BIN", ""))
    gguf_dir = Path(os.environ.get("GGUF_DIR", ""))
    if not (bin_dir / "llama-server").is_file() or not (bin_dir / "llama-lookup-create").is_file():
        raise SystemExit("set LLAMACPP_BIN to the folder holding llama-server and llama-lookup-create")
    model = gguf_dir / MODEL_GGUF
    if not model.is_file():
        raise SystemExit(f"set GGUF_DIR to the folder holding {MODEL_GGUF} (not found: {model})")
    args.logs.mkdir(parents=True, exist_ok=True)

    print("session without speculation ...", file=sys.stderr)
    session = build_session(bin_dir, model, args.logs)
    configs = []
    with tempfile.TemporaryDirectory() as scratch:
        static_path, static_info = build_static_cache(bin_dir, model, Path(scratch))
        for name, llama_args, (spec_type, drafter, options) in CONFIGS:
            llama_args = [a.replace("{gguf}", str(gguf_dir)).replace(STATIC_CACHE, str(static_path))
                          for a in llama_args]
            missing = [a for a in llama_args if a.endswith(".gguf") and not Path(a).is_file()]
            if missing:
                raise SystemExit(f"{name}: {missing[0]} not found")
            print(f"{name} ...", file=sys.stderr)
            log = args.logs / f"llama-{name.replace(' ', '_')}.log"
            requests = run_config(bin_dir, model, llama_args, session, log, spec_type.startswith("draft-"))
            drafters = {Path(a).name: sha256(Path(a)) for a in llama_args if a.endswith(".gguf")}
            shown = [a.replace(str(static_path), STATIC_CACHE).replace(str(gguf_dir), "$GGUF_DIR") for a in llama_args]
            configs.append({"name": name, "llama_server_args": shown, "drafter_gguf_sha256": drafters,
                            "specserve": {"spec_type": spec_type, "drafter": drafter, "options": options},
                            "requests": requests})
            print("  " + " ".join(f"{r['draft_n']}/{r['draft_n_accepted']}" for r in requests), file=sys.stderr)
            if name in TWO_SLOTS:
                print(f"{name}, 2 slots ...", file=sys.stderr)
                configs[-1]["requests_two_slots"] = run_config(
                    bin_dir, model, llama_args, session, args.logs / f"llama-{name.replace(' ', '_')}-np2.log",
                    False, slots=2)
    golden = {
        "about": "llama-server's output and draft counters per request over one session per spec type; "
                 "written by scripts/llamacpp_golden.py, replayed by tests/test_llamacpp_golden.py",
        "llama_cpp": llama_version(bin_dir),
        "model": {"gguf": MODEL_GGUF, "gguf_sha256": sha256(model),
                  "specserve": "the bundled stdlib-coder folder, dtype float32"},
        "server_args": SERVER_ARGS,
        "request": REQUEST,
        "near_tie": NEAR_TIE,
        "prompt_set": PROMPT_SET,
        "static_cache": static_info,
        "session": session,
        "configs": configs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(compact_json(golden) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
