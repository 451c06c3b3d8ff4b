"""specserve against the real llama.cpp on the same model, side by side in one run.

For each configuration (model, dtype, threads, slots, speculative type) the script starts
`llama-server` and `specserve serve` with the same settings, sends both the same greedy
`/completion` requests (8 code prompts, 128 tokens each, one after another with one slot; 16
requests from 4 concurrent clients with 4 slots), and reports client wall-clock output tokens/s,
their ratio and whether the generated text was identical. Models: the bundled model (bf16 and
f32) and a random-weight 306M Qwen3 that the script writes itself (benchmarks/random_qwen3.py),
too big for the CPU caches, so decoding is bound by memory bandwidth.

llama.cpp comes from LLAMACPP_BIN (the folder with llama-server) and its GGUF files from GGUF_DIR
(docs/llamacpp.md says what they must hold). The 306M model is converted with llama.cpp's
convert_hf_to_gguf.py from LLAMACPP_SRC, run by the Python environment GGUF_VENV. Without llama.cpp the script says
so and measures specserve alone. Prints a table, writes JSON and writes the Markdown tables the
documentation links (docs/results/vs_llamacpp.md; see benchmarks/results_table.py).

    .venv/bin/python benchmarks/vs_llamacpp.py [--quick] [--threads 1,2] [--models bundled-bf16,306m]
        [--spec-types none,ngram-mod,...] [--slots 1,4] [--out runs/vs_llamacpp.json]
        [--table-out docs/results/vs_llamacpp.md] [--from-json runs/vs_llamacpp.json] [--note TEXT]
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from specserve.bundled import served_n_max, shipped_drafters  # noqa: E402
from specserve.llm import BUNDLED_MODEL  # noqa: E402

from prompt_sets import CODE_PROMPTS, TEXT_PROMPTS  # noqa: E402
from random_qwen3 import write_random_qwen3  # noqa: E402
import results_table  # noqa: E402
from serve_process import LlamaServerProcess, ServeProcess  # noqa: E402

ALL_SPEC_TYPES = ["none", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                  "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"]
# the shipped drafters' GGUF names as llamacpp-peer.sh writes them
GGUF_DRAFTERS = {"draft-simple": "stdlib-coder-draft-f32.gguf", "draft-eagle3": "stdlib-coder-eagle3-f32.gguf",
                 "draft-dflash": "stdlib-coder-dflash-f32.gguf", "draft-dspark": "stdlib-coder-dspark-f32.gguf"}
# llama.cpp's draft-dflash expects the z-lab block layout; our anchor-first DFlash drafter runs there as
# draft-dspark without a Markov head (same network, same layout)
LLAMA_SPEC_TYPE = {"draft-dflash": "draft-dspark"}
MODEL_LABELS = {"bundled-bf16": "bundled model, bf16", "bundled-f32": "bundled model, f32",
                "306m": "random 306M Qwen3, bf16"}


@dataclass
class ModelCase:
    name: str
    hf_dir: Path
    dtype: str
    gguf: Path | None
    drafters: bool            # the shipped drafters fit this model


@dataclass
class Result:
    model: str
    dtype: str
    threads: int
    slots: int
    spec_type: str
    llama_tok_s: float | None = None
    specserve_tok_s: float | None = None
    identical: int | None = None           # requests whose text matched llama.cpp's
    n_requests: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.llama_tok_s and self.specserve_tok_s:
            return self.specserve_tok_s / self.llama_tok_s
        return None


def convert_306m(hf_dir: Path) -> Path | None:
    """GGUF of the random 306M model, converted once with llama.cpp's own converter."""
    out = hf_dir.parent / (hf_dir.name + ".bf16.gguf")
    if out.is_file():
        return out
    venv, src = os.environ.get("GGUF_VENV"), os.environ.get("LLAMACPP_SRC")
    wrapper = Path.home() / ".cache/llamacpp-peer/llamacpp-tools/convert_hf_to_gguf_gpt2pre.py"
    if not (venv and src and wrapper.is_file()):
        return None
    result = subprocess.run([f"{venv}/bin/python", str(wrapper), src, str(hf_dir), "--outtype", "bf16",
                             "--outfile", str(out)], capture_output=True, text=True)
    return out if result.returncode == 0 and out.is_file() else None


def model_cases(names: list[str], gguf_dir: Path | None, scratch: Path) -> list[ModelCase]:
    cases = []
    for name in names:
        if name in ("bundled-bf16", "bundled-f32"):
            dtype = "bfloat16" if name.endswith("bf16") else "float32"
            gguf = gguf_dir / f"stdlib-coder-{'bf16' if dtype == 'bfloat16' else 'f32'}.gguf" if gguf_dir else None
            cases.append(ModelCase(name, BUNDLED_MODEL, dtype, gguf if gguf and gguf.is_file() else None, True))
        elif name == "306m":
            hf_dir = write_random_qwen3(scratch / "qwen3-306m")
            cases.append(ModelCase(name, hf_dir, "bfloat16", convert_306m(hf_dir), False))
        else:
            raise SystemExit(f"unknown model {name!r} (bundled-bf16, bundled-f32, 306m)")
    return cases


def spec_args(spec_type: str, case: ModelCase, gguf_dir: Path | None, llama: bool) -> list[str] | None:
    """Speculative options for one server, or None when that server cannot run the type."""
    if spec_type == "none":
        return ["--spec-type", "none"] if not llama else []
    if not spec_type.startswith("draft-"):
        return ["--spec-type", spec_type]
    shipped = shipped_drafters().get(spec_type)
    if not case.drafters or shipped is None:
        return None
    n_max = ["--spec-draft-n-max", str(served_n_max(spec_type))]
    if not llama:
        return ["--spec-type", spec_type, "-md", str(shipped[0]), *n_max]
    gguf = gguf_dir / GGUF_DRAFTERS[spec_type] if gguf_dir and spec_type in GGUF_DRAFTERS else None
    if gguf is None or not gguf.is_file():
        return None
    return ["--spec-type", LLAMA_SPEC_TYPE.get(spec_type, spec_type), "-md", str(gguf), *n_max]


def requests_for(slots: int, quick: bool) -> list[str]:
    prompts = CODE_PROMPTS if slots == 1 else CODE_PROMPTS + TEXT_PROMPTS
    return prompts[:4] if quick else prompts


def run_requests(url: str, prompts: list[str], n_predict: int, slots: int) -> tuple[float, list[str]]:
    """(output tokens per second of client wall-clock, the texts in prompt order)."""
    # one client for all requests: a new httpx client per request costs ~20 ms, more than decoding takes
    with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=slots)) as client:
        def one(prompt: str):
            body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                    "cache_prompt": False}
            response = client.post(url + "/completion", json=body)
            response.raise_for_status()
            data = response.json()
            return data["content"], int(data.get("tokens_predicted") or data["timings"]["predicted_n"])

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=slots) as pool:
            outputs = list(pool.map(one, prompts))
        elapsed = time.perf_counter() - start
    return sum(n for _, n in outputs) / elapsed, [text for text, _ in outputs]


def measure(server, prompts, n_predict, slots, result: Result, what: str) -> list[str] | None:
    error = server.wait()
    try:
        if error:
            result.notes.append(f"{what} did not start: {error}")
            return None
        tok_s, texts = run_requests(server.url, prompts, n_predict, slots)
        setattr(result, f"{what}_tok_s", tok_s)
        return texts
    finally:
        server.stop()


def run_case(case: ModelCase, threads: int, slots: int, spec_type: str, args, llama_bin: Path | None,
             gguf_dir: Path | None, logs: Path) -> Result:
    result = Result(case.name, case.dtype, threads, slots, spec_type)
    prompts = requests_for(slots, args.quick)
    result.n_requests = len(prompts)
    common = ["-t", str(threads), "-np", str(slots), "-c", str(1024 * slots)]
    tag = f"{case.name}-t{threads}-np{slots}-{spec_type}"
    ours = spec_args(spec_type, case, gguf_dir, llama=False)
    theirs = spec_args(spec_type, case, gguf_dir, llama=True) if llama_bin and case.gguf else None
    llama_texts = ours_texts = None
    if theirs is not None:
        server = LlamaServerProcess(llama_bin, case.gguf, common + theirs, logs / f"llama-{tag}.log")
        llama_texts = measure(server, prompts, args.n_predict, slots, result, "llama")
    elif llama_bin:
        result.notes.append("llama.cpp cannot run this configuration")
    if ours is not None:
        server = ServeProcess(case.hf_dir, common + ["--dtype", case.dtype, "--temp", "0"] + ours,
                              logs / f"specserve-{tag}.log")
        ours_texts = measure(server, prompts, args.n_predict, slots, result, "specserve")
    if llama_texts and ours_texts:
        result.identical = sum(a == b for a, b in zip(llama_texts, ours_texts))
    return result


def fmt(value, spec="{:.1f}") -> str:
    return "-" if value is None else spec.format(value)


def print_table(results: list[Result]) -> None:
    header = ("model", "dtype", "thr", "slots", "spec type", "llama.cpp tok/s", "specserve tok/s", "ratio", "same text")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in results:
        same = "-" if r.identical is None else f"{r.identical}/{r.n_requests}"
        print(f"| {r.model} | {r.dtype} | {r.threads} | {r.slots} | {r.spec_type} | {fmt(r.llama_tok_s)} | "
              f"{fmt(r.specserve_tok_s)} | {fmt(r.ratio, '{:.2f}')} | {same} |")
    for r in results:
        for note in r.notes:
            print(f"note: {r.model} t{r.threads} np{r.slots} {r.spec_type}: {note}")


def markdown_tables(record: dict) -> str:
    """One table per model: a row per spec type, a column per (threads, slots), cells
    'specserve tok/s / llama.cpp tok/s (ratio)'; then how many texts matched and any notes."""
    def rate(value):
        return results_table.fmt(value, 0 if value is not None and value >= 100 else 1)

    out = ["cells: specserve tok/s / llama.cpp tok/s (ratio); `-` where llama.cpp cannot run the "
           "configuration", ""]
    models = dict.fromkeys((r["model"], r["dtype"]) for r in record["results"])
    for model, dtype in models:
        rows = [r for r in record["results"] if (r["model"], r["dtype"]) == (model, dtype)]
        columns = list(dict.fromkeys((r["threads"], r["slots"]) for r in rows))
        cells = {(r["spec_type"], r["threads"], r["slots"]): r for r in rows}
        label = MODEL_LABELS.get(model, f"{model}, {dtype}")
        out.append(f"| {label} | " + " | ".join(f"`-t {t}`, {s} slot{'s' if s > 1 else ''}" for t, s in columns)
                   + " |")
        out.append("|---|" + "---|" * len(columns))
        for spec_type in dict.fromkeys(r["spec_type"] for r in rows):
            line = []
            for t, s in columns:
                r = cells.get((spec_type, t, s))
                if r is None or r["specserve_tok_s"] is None:
                    line.append("-")
                elif r["llama_tok_s"] is None:
                    line.append(f"{rate(r['specserve_tok_s'])} / -")
                else:
                    ratio = r["specserve_tok_s"] / r["llama_tok_s"]
                    line.append(f"{rate(r['specserve_tok_s'])} / {rate(r['llama_tok_s'])} ({ratio:.2f})")
            out.append(f"| {spec_type} | " + " | ".join(line) + " |")
        compared = [r for r in rows if r["identical"] is not None]
        same, total = sum(r["identical"] for r in compared), sum(r["n_requests"] for r in compared)
        notes = sorted({f"{r['spec_type']}: {n}" for r in rows for n in r["notes"]})
        out += ["", f"Same generated text as llama.cpp: {same} of {total} requests."
                + (" " + "; ".join(notes) + "." if notes else ""), ""]
    return "\n".join(out)


def write_markdown(args, record: dict) -> None:
    machine = record.get("machine") or {}
    where = f"{machine.get('platform', '?')}, {machine.get('cpus', '?')} CPUs"
    conditions = (f"Greedy `/completion` requests of {record.get('n_predict', '?')} tokens to `llama-server` "
                  f"and `specserve serve` on the same model and settings; client wall-clock output tokens/s; "
                  f"one run of each configuration.")
    results_table.write_table(args, "specserve vs llama.cpp", markdown_tables(record), conditions, where)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bundled-bf16,bundled-f32,306m")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--slots", default="1,4")
    parser.add_argument("--spec-types", default=",".join(ALL_SPEC_TYPES),
                        help="speculative types for the bundled model (the 306M model runs none and ngram-mod)")
    parser.add_argument("--n-predict", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="4 prompts per configuration instead of 8 (16)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "vs_llamacpp.json")
    results_table.add_options(parser, "vs_llamacpp")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:     # several runs make one record (e.g. one per model)
        write_markdown(args, {**earlier[0], "results": [r for run in earlier for r in run["results"]]})
        return 0

    llama_bin = Path(os.environ["LLAMACPP_BIN"]) if os.environ.get("LLAMACPP_BIN") else None
    if llama_bin is not None and not (llama_bin / "llama-server").is_file():
        print(f"LLAMACPP_BIN={llama_bin} has no llama-server; measuring specserve alone")
        llama_bin = None
    if llama_bin is None:
        print("no llama.cpp build found (set LLAMACPP_BIN and GGUF_DIR, see docs/llamacpp.md): "
              "measuring specserve alone")
    gguf_dir = Path(os.environ["GGUF_DIR"]) if os.environ.get("GGUF_DIR") else None
    scratch = ROOT / "runs"
    logs = scratch / "vs_llamacpp_logs"
    logs.mkdir(parents=True, exist_ok=True)

    results = []
    for case in model_cases(args.models.split(","), gguf_dir, scratch):
        spec_types = args.spec_types.split(",") if case.drafters else ["none", "ngram-mod"]
        for threads in (int(t) for t in args.threads.split(",")):
            for slots in (int(s) for s in args.slots.split(",")):
                for spec_type in spec_types:
                    if case.name == "306m" and slots > 1:
                        continue
                    result = run_case(case, threads, slots, spec_type, args, llama_bin, gguf_dir, logs)
                    results.append(result)
                    print(f"{case.name} t{threads} np{slots} {spec_type:14s} llama.cpp {fmt(result.llama_tok_s):>8} "
                          f"specserve {fmt(result.specserve_tok_s):>8} ratio {fmt(result.ratio, '{:.2f}')}",
                          flush=True)
    print("\n(one run of each configuration: on a machine doing other work, figures move by ~10 %)\n")
    print_table(results)
    record = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
        "llama_cpp": str(llama_bin) if llama_bin else None, "n_predict": args.n_predict,
        "results": [dict(asdict(r), ratio=r.ratio) for r in results]}
    results_table.write_json(args.out, record)
    write_markdown(args, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
