"""Where an engine step's time goes: its native calls (every `ss_*` function of the kernels library, timed)
against the rest, which is Python: the part of a step the kernels cannot speed up.

Each configuration (as in interleaved.py, [REV@]SPEC[:QUANT[:N_MAX[:FLAGS[:OPTIONS]]]]) runs the prompt set
once to warm up and once measured; the table gives per engine step the wall time of `Engine._run`, the
native calls' share by function, and the remainder. Timing each native call adds about a µs per call.

    .venv/bin/python benchmarks/step_split.py none draft-dspark draft-mtp:::q [-T 0] [-n 128]
        [--sets code,free-text] [--out runs/step_split.json]
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import re
import time
from pathlib import Path

from interleaved import PROMPT_SETS, build


class TimedCalls:
    """Wraps every ss_* function of the kernels library behind `lib` with a timer (all engines share it)."""

    def __init__(self, lib, capi_source: str):
        self.seconds: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()
        for name in sorted(set(re.findall(r"\b(ss_\w+)", capi_source))):
            if hasattr(lib, name):
                setattr(lib, name, self._timed(getattr(lib, name), name))

    def _timed(self, fn, name):
        def call(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
        return call


def measure(config: str, texts: list[str], temperature: float, n_tokens: int) -> dict:
    llm = build(config, 1)
    package = type(llm).__module__.split(".")[0]          # specserve, or a revision's copy of it
    code, capi = importlib.import_module(package), importlib.import_module(package + ".kernels.capi")
    timed = TimedCalls(code.kernels.library(), Path(capi.__file__).read_text())
    prompts = [llm.tokenizer.encode(t) for t in texts]
    engine, run_seconds = llm.engine, [0.0]
    inner = engine._run

    def run(active):
        t0 = time.perf_counter()
        inner(active)
        run_seconds[0] += time.perf_counter() - t0
    engine._run = run
    tokens = 0
    for measured in (False, True):
        run_seconds[0], steps0 = 0.0, engine.n_steps
        timed.seconds.clear()
        timed.calls.clear()
        for i, p in enumerate(prompts):
            params = code.SamplingParams(temperature=temperature, max_tokens=n_tokens, ignore_eos=True, seed=i)
            out = llm.generate([p], params)
            tokens += len(out[0].token_ids) if measured else 0
    steps = engine.n_steps - steps0
    native = sum(timed.seconds.values())
    return {"config": config, "steps": steps, "tokens": tokens, "step_ms": 1e3 * run_seconds[0] / steps,
            "native_ms": 1e3 * native / steps, "other_ms": 1e3 * (run_seconds[0] - native) / steps,
            "by_function_ms": {k: 1e3 * v / steps for k, v in timed.seconds.most_common()},
            "calls_per_step": {k: v / steps for k, v in timed.calls.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+", help="[REV@]SPEC[:QUANT[:N_MAX[:FLAGS[:OPTIONS]]]] (interleaved.py)")
    parser.add_argument("-T", "--temperature", type=float, default=0.0)
    parser.add_argument("-n", "--n-tokens", type=int, default=128)
    parser.add_argument("--sets", default="code,free-text")
    parser.add_argument("--out", default="runs/step_split.json")
    args = parser.parse_args()
    rows = []
    print(f"T={args.temperature:g}, 1 slot, sets {args.sets}, {args.n_tokens} tokens; ms per engine step "
          f"(prompt steps included)")
    print(f"{'configuration':<28} {'tok/step':>8} {'step':>7} {'native':>7} {'other':>7}  native calls")
    for config in args.configs:
        texts = [t for name in args.sets.split(",") for t in PROMPT_SETS[name]]
        row = measure(config, texts, args.temperature, args.n_tokens)
        rows.append(row)
        calls = ", ".join(f"{k[3:]} {v:.3f}" for k, v in row["by_function_ms"].items() if v >= 0.005)
        print(f"{config:<28} {row['tokens'] / row['steps']:8.2f} {row['step_ms']:7.3f} {row['native_ms']:7.3f} "
              f"{row['other_ms']:7.3f}  {calls}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": rows}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
