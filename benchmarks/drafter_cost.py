"""What a drafter must reach to pay on this machine: the cost side of choosing a drafter shape.

A speculative step costs one draft call plus a target forward over 1 + n rows; plain decoding
costs a 1-row forward per token. So a drafter pays only when its mean acceptance length tau
exceeds the break-even

    tau* = (draft call + verify(1 + n rows)) / verify(1 row),

and it can never run faster than its ceiling, (1 + n) / tau*: every draft accepted. A ceiling below a
goal means no training reaches that goal with that drafter shape on this machine.

This script measures, on the bundled model and in one run: the target forward by row count, and
the draft call of every shipped drafter (bfloat16, int8 and, with int8 dot products, q8 weights) and of block-drafter shapes (layers, block size, Markov
rank; random weights, since cost does not depend on them), each at one slot (the shipped ones
also for 4 slots at once; the shapes with the weights a shipped drafter of their type is served with), greedy,
on the native kernels with one thread. With the shipped
drafters' measured tau (benchmarks/method_table.py) it predicts their speedup. Prints the table, writes JSON and docs/results/drafter_cost.md.

    .venv/bin/python benchmarks/drafter_cost.py [--out runs/drafter_cost.json] [--table-out FILE]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


from specserve import LLM, SamplingParams, kernels
from specserve.bundled import STDLIB_CODER, served_n_max, served_quant, shipped_drafters
from specserve.models.block_drafter import BlockDrafter, save_block_drafter
from specserve.models.block_drafter_format import new_block_drafter_config
from specserve.speculative.step_cost import profile_step_cost
from specserve.models.transformer import CausalLM

from prompt_sets import CODE_PROMPTS
import results_table

# (layers, block size, Markov rank): DFlash shapes have rank 0
BLOCK_SHAPES = [(1, 4, 0), (1, 8, 0), (2, 8, 0), (1, 8, 32), (1, 8, 64), (2, 4, 64), (2, 8, 64), (2, 16, 64),
                (3, 8, 64)]


def forward_ms_by_rows(target: CausalLM, rows_list, position: int = 200) -> dict[int, float]:
    """Target forward time (ms) for `rows` new rows after a `position`-token context: the medians of the
    timings --spec-schedule profiles, not fitted (a ceiling divides by the one-row time)."""
    table = profile_step_cost(target, 1, max(rows_list), context=position, repeats=30, fit=False)
    return {rows: 1e3 / table.steps_per_second(rows) for rows in rows_list}


def random_block_drafter(target: CausalLM, folder: Path, layers: int, block: int, rank: int) -> Path:
    config = new_block_drafter_config(target.config, block_size=block, num_layers=layers, mask_token_id=1,
                                      markov_rank=rank, confidence_head=rank > 0, model_dir=folder)
    model = BlockDrafter(config)
    model.init_weights(seed=0)
    return save_block_drafter(model, folder, tokenizer_from=STDLIB_CODER)


def draft_call_ms(spec_type: str, folder: Path, n_max: int, n_tokens: int, slots: int = 1,
                  quant: str = "none") -> tuple[float, float]:
    """(mean ms per draft call, tau) over four code prompts, greedy: one after another on one slot, or
    all at once over `slots` slots (one call drafts for every slot); `quant`: the drafter's weights."""
    llm = LLM(STDLIB_CODER, draft_model=folder, spec_type=spec_type, spec_draft_n_max=n_max, n_parallel=slots,
              quant_draft=quant)
    params = SamplingParams(temperature=0, max_tokens=n_tokens, ignore_eos=True)
    llm.generate(CODE_PROMPTS[:slots], [SamplingParams(temperature=0, max_tokens=8)] * slots)       # warm-up
    before = llm.engine.driver.counters[spec_type]
    calls0, us0 = before.n_call_draft, before.t_draft_us
    if slots > 1:
        outs = llm.generate(CODE_PROMPTS[:4], [params] * 4)
    else:
        outs = [llm.generate(p, params)[0] for p in CODE_PROMPTS[:4]]
    c = llm.engine.driver.counters[spec_type]
    steps = sum(o.draft_stats.get("verify_steps", 0) for o in outs)
    accepted = sum(o.draft_stats.get("accepted", 0) for o in outs)
    return (c.t_draft_us - us0) / 1000 / max(1, c.n_call_draft - calls0), 1 + accepted / max(1, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--n-tokens", type=int, default=96)
    parser.add_argument("--out", default="runs/drafter_cost.json")
    results_table.add_options(parser, "drafter_cost")
    args = parser.parse_args()
    earlier = results_table.load_runs(args)
    if earlier is not None:
        write_markdown(args, earlier[-1])
        return
    kernels.set_threads(1)
    verify = forward_ms_by_rows(CausalLM.from_pretrained(STDLIB_CODER), [1, 2, 4, 5, 7, 9, 17])
    rows = []
    for spec_type, (folder, _) in shipped_drafters().items():
        n_max = served_n_max(spec_type)
        for quant in ("none", "int8") + (("q8",) if kernels.has_int8_dot() else ()):
            ms, tau = draft_call_ms(spec_type, folder, n_max, args.n_tokens, quant=quant)
            ms_4, _ = draft_call_ms(spec_type, folder, n_max, args.n_tokens, slots=4, quant=quant)
            name = f"shipped {spec_type}" + (f", {quant}" if quant != "none" else "")
            rows.append({"drafter": name, "spec_type": spec_type, "n": n_max, "draft_ms": ms,
                         "draft_ms_4_slots": ms_4, "tau": tau})
    float_target = CausalLM.from_pretrained(STDLIB_CODER, dtype="float32")     # shapes for the random drafters
    with tempfile.TemporaryDirectory() as tmp:
        for layers, block, rank in BLOCK_SHAPES:
            spec_type = "draft-dspark" if rank else "draft-dflash"
            folder = random_block_drafter(float_target, Path(tmp) / f"{layers}-{block}-{rank}", layers, block, rank)
            quant = served_quant(spec_type) or "none"         # as a shipped drafter of that type is served
            ms, _ = draft_call_ms(spec_type, folder, block, args.n_tokens, quant=quant)
            rows.append({"drafter": f"{spec_type}: {layers} layer(s), block {block}, rank {rank}"
                                    + (f", {quant}" if quant != "none" else ""),
                         "spec_type": spec_type, "n": block, "draft_ms": ms, "tau": None})
    for r in rows:
        n_rows = r["n"] + 1
        r["verify_ms"] = verify[n_rows] if n_rows in verify else None
        r["break_even_tau"] = (r["draft_ms"] + r["verify_ms"]) / verify[1] if r["verify_ms"] else None
        r["predicted_speedup"] = r["tau"] / r["break_even_tau"] if r["tau"] and r["break_even_tau"] else None
        r["ceiling"] = n_rows / r["break_even_tau"] if r["break_even_tau"] else None
    record = {"verify_ms_by_rows": verify, "drafters": rows, "machine": results_table.machine(),
              "threads": kernels.threads()}
    print(markdown_table(record))
    results_table.write_json(Path(args.out), record)
    write_markdown(args, record)


def markdown_table(record: dict) -> str:
    verify = {int(k): v for k, v in record["verify_ms_by_rows"].items()}
    out = ["| target rows | " + " | ".join(str(k) for k in verify) + " |", "|---|" + "---|" * len(verify),
           "| forward ms | " + " | ".join(f"{v:.3f}" for v in verify.values()) + " |", "",
           "| drafter | n drafts | draft call ms | ... for 4 slots | verify ms (1 + n rows) | break-even tau | "
           "measured tau | predicted speedup | ceiling |", "|---|---|---|---|---|---|---|---|---|"]
    for r in record["drafters"]:
        out.append(f"| {r['drafter']} | {r['n']} | {r['draft_ms']:.3f} | "
                   f"{results_table.fmt(r.get('draft_ms_4_slots'), 3)} | {results_table.fmt(r['verify_ms'], 3)} | "
                   f"{results_table.fmt(r['break_even_tau'], 2)} | {results_table.fmt(r['tau'], 2)} | "
                   f"{results_table.fmt(r['predicted_speedup'], 2)} | {results_table.fmt(r.get('ceiling'), 2)} |")
    out += ["", "break-even tau = (draft call + verify(1 + n rows)) / verify(1 row); predicted speedup = measured "
            "tau / break-even tau (code prompts, T=0, one slot); ceiling = (1 + n) / break-even tau, the speedup "
            "if every draft were accepted (the engine's own work around each forward is left out of both). Random-weight shapes have no tau. A draft call for "
            "4 slots drafts for four requests at once (what --spec-schedule weighs at 4 slots)."]
    return "\n".join(out)


def write_markdown(args, record: dict) -> None:
    conditions = (f"stdlib-coder, one slot, greedy, {record['threads']} thread(s), native kernels; forward times "
                  f"after a 200-token context, the medians of 30 as --spec-schedule times them.")
    results_table.write_table(args, "What a drafter costs, and the acceptance it needs to pay",
                              markdown_table(record), conditions, record.get("machine"))


if __name__ == "__main__":
    main()
