"""Do llama.cpp and specserve agree on files written by `specserve export-gguf`?

For each speculative type with a GGUF form (none, draft-simple, draft-eagle3, draft-dflash,
draft-dspark) the script starts llama.cpp's `llama-server` and `specserve serve` on the same exported
files (-m target.gguf, -md drafter.gguf), one slot, `-t 1`, sends the same greedy `/completion`
requests to both and compares the texts and the drafting counters (`timings.draft_n`,
`timings.draft_n_accepted`). Needs LLAMACPP_BIN (docs/llamacpp.md). The files come from
`specserve export-gguf --bundled DIR --outtype TYPE` (written first when DIR has none).

    .venv/bin/python benchmarks/gguf_llamacpp_check.py [--dir runs/gguf-f32] [--outtype f32] [--n-predict 64]
        [--prompts 4] [--llama-args=--no-repack] [--out runs/gguf_llamacpp_check-f32.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from specserve.bundled import served_n_max  # noqa: E402

from prompt_sets import CODE_PROMPTS  # noqa: E402
from serve_process import LlamaServerProcess, ServeProcess  # noqa: E402

DRAFTER_FILES = {"draft-simple": "stdlib-coder-draft", "draft-eagle3": "stdlib-coder-eagle3",
                 "draft-dflash": "stdlib-coder-dflash", "draft-dspark": "stdlib-coder-dspark"}
# llama.cpp's draft-dflash runs the z-lab bonus-anchor block; the anchor-first DFlash drafter is its
# draft-dspark without a Markov head (docs/llamacpp.md)
LLAMA_SPEC_TYPE = {"draft-dflash": "draft-dspark"}


def run(server, prompts: list[str], n_predict: int) -> tuple[list[str], int, int]:
    """(texts, drafted tokens, accepted tokens) over the prompts, one request at a time."""
    error = server.wait(warm_up=False)
    if error:
        server.stop()
        raise RuntimeError(f"server did not start: {error} (log: {server.log_path})")
    texts, drafted, accepted = [], 0, 0
    try:
        with httpx.Client(timeout=600) as client:
            for prompt in prompts:
                body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
                        "cache_prompt": False}
                data = client.post(server.url + "/completion", json=body).raise_for_status().json()
                texts.append(data["content"])
                drafted += int(data["timings"].get("draft_n", 0))
                accepted += int(data["timings"].get("draft_n_accepted", 0))
    finally:
        server.stop()
    return texts, drafted, accepted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=None, help="folder of exported files (default: runs/gguf-OUTTYPE)")
    parser.add_argument("--outtype", default="f32")
    parser.add_argument("--n-predict", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--out", default=None, help="JSON results (default: runs/gguf_llamacpp_check-OUTTYPE.json)")
    parser.add_argument("--llama-args", default="",
                        help="extra llama-server arguments, e.g. --no-repack (this build's repacked Q8_0 CPU path "
                             "crashes on some machines)")
    args = parser.parse_args()
    llama_bin = Path(os.environ.get("LLAMACPP_BIN", ""))
    if not (llama_bin / "llama-server").is_file():
        print("set LLAMACPP_BIN to the folder holding llama-server (docs/llamacpp.md)")
        return 1
    out_dir = Path(args.dir or ROOT / "runs" / f"gguf-{args.outtype}")
    target = out_dir / f"stdlib-coder-{args.outtype}.gguf"
    if not target.is_file():
        subprocess.run([sys.executable, "-m", "specserve", "export-gguf", "--bundled", str(out_dir),
                        "--outtype", args.outtype], check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    logs = out_dir / "logs"
    logs.mkdir(exist_ok=True)
    prompts = CODE_PROMPTS[:args.prompts]
    common = ["-t", "1", "-np", "1", "-c", "1024"]
    print("| spec type | text equal | llama.cpp drafted / accepted | specserve drafted / accepted |")
    print("|---|---|---|---|")
    rows = []
    for spec_type in ["none", *DRAFTER_FILES]:
        extra_ours, extra_theirs = ["--spec-type", "none"], []
        if spec_type != "none":
            drafter = out_dir / f"{DRAFTER_FILES[spec_type]}-{args.outtype}.gguf"
            n_max = ["--spec-draft-n-max", str(served_n_max(spec_type))]
            extra_ours = ["--spec-type", spec_type, "-md", str(drafter), *n_max]
            extra_theirs = ["--spec-type", LLAMA_SPEC_TYPE.get(spec_type, spec_type), "-md", str(drafter), *n_max]
        theirs = run(LlamaServerProcess(llama_bin, target, common + args.llama_args.split() + extra_theirs,
                                        logs / f"llama-{spec_type}.log"),
                     prompts, args.n_predict)
        ours = run(ServeProcess(target, common + ["--temp", "0", *extra_ours], logs / f"specserve-{spec_type}.log"),
                   prompts, args.n_predict)
        equal = sum(a == b for a, b in zip(theirs[0], ours[0]))
        print(f"| {spec_type} | {equal}/{len(prompts)} | {theirs[1]} / {theirs[2]} | {ours[1]} / {ours[2]} |",
              flush=True)
        rows.append({"spec_type": spec_type, "text_equal": equal, "n_prompts": len(prompts),
                     "llama": {"draft_n": theirs[1], "draft_n_accepted": theirs[2]},
                     "specserve": {"draft_n": ours[1], "draft_n_accepted": ours[2]}})
    out = Path(args.out or ROOT / "runs" / f"gguf_llamacpp_check-{args.outtype}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"outtype": args.outtype, "n_predict": args.n_predict, "threads": 1,
                               "llama_args": args.llama_args, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
