"""The n-gram methods side by side: acceptance rate, mean acceptance length and speedup of
each draftless type (and --spec-default) against the no-speculation baseline, on
code-editing prompts (the model must repeat or lightly change code given in the prompt)
and on free-continuation prompts. One run, greedy, requests one after another on one slot
(as llama-server with -np 1), a fresh engine per configuration and repeat.

  acc. rate  accepted / drafted tokens
  mean len   1 + accepted / verification steps (tokens emitted per target forward that verified a draft)
  speedup    baseline time / this configuration's time for the same prompts and tokens, measured
             as process CPU time (robust to other jobs on a shared machine; run with -t 1),
             best of --repeats; tok/s is the wall-clock decode rate
  same       greedy output identical to the baseline (it must be)

Optionally (--static-corpus, default: this Python's standard library) a static n-gram cache is
built with `specserve lookup create` semantics and ngram-cache also runs with it.

    .venv/bin/python benchmarks/ngram_methods.py [-m DIR] [-n 128] [--out runs/ngram_methods.json]
"""
from __future__ import annotations

import argparse
import json
import sysconfig
import time
from pathlib import Path


from specserve import LLM, SamplingParams
from specserve import kernels
from specserve.commands.demo import DEMO_PROMPT
from specserve.llm import BUNDLED_MODEL
from specserve.speculative.ngram_cache_store import NGRAM_STATIC, NgramCache

# Each prompt shows some code, then starts writing it again with a small change; the
# faithful continuation copies most of it.
EDIT_PROMPTS = [
    DEMO_PROMPT,
    '''class Stack:
    """A last-in, first-out stack."""

    def __init__(self):
        self._items = []

    def push(self, item):
        self._items.append(item)

    def pop(self):
        if not self._items:
            raise IndexError("pop from an empty stack")
        return self._items.pop()

    def peek(self):
        if not self._items:
            raise IndexError("peek at an empty stack")
        return self._items[-1]

    def __len__(self):
        return len(self._items)


class Queue:
    """A first-in, first-out queue."""

    def __init__(self):
        self._items = []
''',
    '''def read_config(path):
    """Read a key = value file into a dictionary."""
    config = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
    return config


def read_settings(path):
    """Read a key = value file into a dictionary."""
    settings = {}
    with open(path, encoding="utf-8") as f:
''',
    '''import os


def find_files(top, suffix):
    """Yield the paths under top whose names end with suffix."""
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(suffix):
                yield os.path.join(dirpath, name)


def find_dirs(top, suffix):
    """Yield the paths under top whose names end with suffix."""
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
''',
    '''def parse_args(argv):
    options = {}
    positional = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name = arg[2:]
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                options[name] = argv[i + 1]
                i += 2
                continue
            options[name] = True
        else:
            positional.append(arg)
        i += 1
    return options, positional


def parse_argv(argv):
    options = {}
    positional = []
    i = 0
''',
    '''    def test_push_and_pop(self):
        stack = Stack()
        stack.push(1)
        stack.push(2)
        self.assertEqual(stack.pop(), 2)
        self.assertEqual(stack.pop(), 1)
        self.assertEqual(len(stack), 0)

    def test_push_and_peek(self):
        stack = Stack()
        stack.push(1)
        stack.push(2)
''',
]

FREE_PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n",
    "class LRUCache:\n    \"\"\"A least-recently-used cache.\"\"\"\n\n    def __init__(self, capacity):\n",
    "def parse_header(line):\n    \"\"\"Parse a Content-type like header.\"\"\"\n",
    "def _format_time(seconds):\n",
    "from collections import namedtuple\n\nPoint = namedtuple('Point', ['x', 'y'])\n\n\n",
    "def walk(top, topdown=True, onerror=None):\n",
]

SETS = {"code editing": EDIT_PROMPTS, "free continuation": FREE_PROMPTS}

# (label, spec_type, options); llama.cpp's defaults unless the label says otherwise
CONFIGS = [
    ("none (baseline)", "none", {}),
    ("ngram-simple", "ngram-simple", {}),
    ("ngram-simple n=4 m=32", "ngram-simple", {"spec_ngram_simple_size_n": 4, "spec_ngram_simple_size_m": 32}),
    ("ngram-map-k", "ngram-map-k", {}),
    ("ngram-map-k n=4 m=32", "ngram-map-k", {"spec_ngram_map_k_size_n": 4, "spec_ngram_map_k_size_m": 32}),
    ("ngram-map-k4v", "ngram-map-k4v", {}),
    ("ngram-map-k4v n=4 m=32", "ngram-map-k4v",
     {"spec_ngram_map_k4v_size_n": 4, "spec_ngram_map_k4v_size_m": 32}),
    ("ngram-mod", "ngram-mod", {}),
    ("ngram-mod 8/4/32", "ngram-mod",
     {"spec_ngram_mod_n_match": 8, "spec_ngram_mod_n_min": 4, "spec_ngram_mod_n_max": 32}),
    ("--spec-default", "none", {"spec_default": True}),
    ("ngram-cache", "ngram-cache", {}),
    ("mod+k4v+simple n=4", "ngram-mod,ngram-map-k4v,ngram-simple",
     {"spec_ngram_simple_size_n": 4, "spec_ngram_simple_size_m": 32,
      "spec_ngram_map_k4v_size_n": 4, "spec_ngram_map_k4v_size_m": 32}),
]


def build_static_cache(corpus: Path, tokenizer, out: Path, max_bytes: int) -> tuple[Path, int]:
    """A static cache (2-grams) over the .py files of `corpus`, up to max_bytes of text."""
    texts, size = [], 0
    for path in sorted(corpus.rglob("*.py")):
        if "test" in path.parts or "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(text)
        size += len(text)
        if size >= max_bytes:
            break
    tokens = tokenizer.encode("\n".join(texts))
    cache = NgramCache()
    cache.update(tokens, NGRAM_STATIC, NGRAM_STATIC, len(tokens))
    out.parent.mkdir(parents=True, exist_ok=True)
    cache.save(out, order="libstdc++")          # as llama-lookup-create writes it
    return out, len(tokens)


def run_set(model: str, spec_type: str, options: dict, prompts: list[list[int]], n_tokens: int) -> dict:
    llm = LLM(model, spec_type=spec_type, **options)
    llm.generate(prompts[0][:16], SamplingParams(temperature=0, max_tokens=4))       # warm-up
    cpu0 = time.process_time()
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True))
    cpu_s = time.process_time() - cpu0
    decode_ms = sum(o.timings["predicted_ms"] for o in outs)
    tokens = sum(len(o.token_ids) for o in outs)
    drafted = sum(o.draft_stats.get("drafted", 0) for o in outs)
    accepted = sum(o.draft_stats.get("accepted", 0) for o in outs)
    steps = sum(o.draft_stats.get("verify_steps", 0) for o in outs)
    return {"cpu_s": cpu_s, "decode_ms": decode_ms, "tokens": tokens, "tokens_per_s": 1000 * tokens / decode_ms,
            "drafted": drafted, "accepted": accepted, "verify_steps": steps,
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_acceptance_length": 1 + accepted / steps if steps else None,
            "outputs": [o.token_ids for o in outs], "stats_lines": llm.stats_lines()}


def fmt(value, spec):
    return format(value, spec) if value is not None else "-".rjust(len(format(0.0, spec)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default=str(BUNDLED_MODEL))
    parser.add_argument("-n", "--n-tokens", type=int, default=128, help="tokens generated per prompt")
    parser.add_argument("-t", "--threads", type=int, default=1,
                        help="compute threads (default 1, so that CPU time measures the work)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration; the fastest counts")
    parser.add_argument("--static-corpus", default=sysconfig.get_paths()["stdlib"],
                        help="folder of .py files for ngram-cache's static cache ('' to skip)")
    parser.add_argument("--static-bytes", type=int, default=2_000_000, help="text read from --static-corpus")
    parser.add_argument("--only", default="", help="comma list of configuration labels to run (default: all)")
    parser.add_argument("--out", default="runs/ngram_methods.json")
    args = parser.parse_args()
    if args.threads > 0:
        kernels.set_threads(args.threads)

    base = LLM(args.model)
    if base.tokenizer is None:
        raise SystemExit(f"{args.model} has no tokenizer.json")
    sets = {name: [base.tokenizer.encode(p) for p in prompts] for name, prompts in SETS.items()}
    configs = list(CONFIGS)
    result = {"model": args.model, "n_tokens": args.n_tokens, "threads": kernels.threads(),
              "prompts": {k: len(v) for k, v in sets.items()}}
    if args.static_corpus:
        static_path, n_static = build_static_cache(Path(args.static_corpus), base.tokenizer,
                                                   Path(args.out).with_suffix(".static.bin"), args.static_bytes)
        result["static_cache"] = {"file": str(static_path), "tokens": n_static, "corpus": args.static_corpus}
        configs.append(("ngram-cache + static cache", "ngram-cache", {"lookup_cache_static": str(static_path)}))
    if args.only:
        wanted = {s.strip() for s in args.only.split(",")} | {"none (baseline)"}
        configs = [c for c in configs if c[0] in wanted]
    del base

    runs: dict[tuple[str, str], dict] = {}
    t_start = time.perf_counter()
    for _ in range(args.repeats):                 # repeats outermost: drift hits every configuration alike
        for label, spec_type, options in configs:
            for set_name, prompts in sets.items():
                run = run_set(args.model, spec_type, options, prompts, args.n_tokens)
                best = runs.get((label, set_name))
                if best is None or run["cpu_s"] < best["cpu_s"]:
                    runs[(label, set_name)] = run

    table = []
    for label, spec_type, options in configs:
        row = {"label": label, "spec_type": spec_type, "options": options}
        for set_name in sets:
            run, baseline = runs[(label, set_name)], runs[("none (baseline)", set_name)]
            row[set_name] = {k: v for k, v in run.items() if k != "outputs"}
            row[set_name]["speedup"] = baseline["cpu_s"] / run["cpu_s"]
            row[set_name]["speedup_wall"] = run["tokens_per_s"] / baseline["tokens_per_s"]
            row[set_name]["same_as_baseline"] = run["outputs"] == baseline["outputs"]
        table.append(row)
    result["results"] = table
    result["wall_s"] = time.perf_counter() - t_start

    names = list(sets)
    print(f"\nn-gram methods: {Path(args.model).name}, greedy, {args.n_tokens} tokens per prompt, "
          f"{len(EDIT_PROMPTS)} code-editing + {len(FREE_PROMPTS)} free-continuation prompts, "
          f"{kernels.threads()} threads, best of {args.repeats}\n")
    head = "".join(f" | {n:^36}" for n in names)
    print(f"{'method':<28}{head}")
    print(f"{'':<28}" + " | acc.rate mean len speedup  tok/s same" * len(names))
    print("-" * (28 + 39 * len(names)))
    for row in table:
        cells = ""
        for n in names:
            r = row[n]
            cells += (f" | {fmt(r['acceptance_rate'], '8.3f')} {fmt(r['mean_acceptance_length'], '8.2f')} "
                      f"{r['speedup']:6.2f}x {r['tokens_per_s']:6.1f} {'yes' if r['same_as_baseline'] else 'NO':>4}")
        print(f"{row['label']:<28}{cells}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
