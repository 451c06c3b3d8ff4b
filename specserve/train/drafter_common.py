"""What the drafter trainers share: the frozen target's training signals, the soft-label loss,
measuring the trained drafter's acceptance through the real engine, and the model card."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..llm import LLM
from ..models.transformer import CausalLM
from ..sampling import SamplingParams
from .data_parallel import DataParallel
from .draft_loop import LoopSettings
from .draft_windows import WindowSampler

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "generation_config.json")


@dataclass
class DrafterJob:
    """Everything a trainer needs, filled in by `specserve train-draft`."""
    target_dir: Path
    out_dir: Path
    train_samples: list
    eval_samples: list
    loop: LoopSettings
    batch_size: int = 8
    seq_len: int = 512
    seed: int = 0
    command: str = ""                       # the command line, for the model card
    data_path: str = ""
    options: dict = field(default_factory=dict)   # method-specific option values
    log: Callable[[str], None] = print
    dp: DataParallel = DataParallel()         # torchrun's ranks (train on a share of each batch)
    precision: str = "bf16"                   # the drafter's forward: bf16 autocast, or f32

    def autocast(self):
        """bf16 autocast (faster on CPUs with bf16 units), or plain float32, which takes the same
        steps at any world size to float rounding (bf16 products change with the batch's shape)."""
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def sampler(self) -> WindowSampler:
        """Training windows: the global batch's random stream, this rank's rows."""
        return WindowSampler(self.train_samples, self.seq_len, self.batch_size, self.seed,
                             self.dp.share(self.batch_size))


def load_frozen_target(target_dir: Path) -> CausalLM:
    """The target as it is served (its checkpoint dtype), frozen: its features are the drafter's inputs."""
    target = CausalLM.from_pretrained(target_dir)
    target.requires_grad_(False)
    return target


def target_distribution(target: CausalLM, final_hidden: torch.Tensor) -> torch.Tensor:
    """float32 softmax of the target's logits for rows of final-normed hidden states."""
    return torch.softmax(target.logits(final_hidden), dim=-1)


def soft_cross_entropy(logits: torch.Tensor, probs: torch.Tensor,
                       denominator: Callable = DataParallel().denominator, tv_weight: float = 0.0) -> torch.Tensor:
    """Mean over rows of -sum p log q: the KL to the target's distribution, up to a constant; plus
    tv_weight x the total variation distance 1/2 sum |p - q|, whose complement is the probability that
    rejection sampling accepts a draft sampled from q at T=1 (DSpark's L1 term, for the chain drafters).
    `denominator` turns the row count into the normaliser (DataParallel.denominator: the global one)."""
    log_q = F.log_softmax(logits.float(), dim=-1)
    per_row = -(probs * log_q).sum(-1)
    if tv_weight:
        per_row = per_row + tv_weight * 0.5 * (probs - log_q.exp()).abs().sum(-1)
    return per_row.sum() / denominator(per_row.shape[0])


def copy_tokenizer(target_dir: Path, out_dir: Path) -> None:
    for name in TOKENIZER_FILES:
        if (target_dir / name).is_file():
            shutil.copy(target_dir / name, out_dir / name)


def measure_acceptance(target_dir: Path, spec_type: str, draft_dir: Path | None, prompts: list[list[int]],
                       n_max: int = 3, max_tokens: int = 96, temperature: float = 0.0, seed: int = 0) -> dict:
    """Mean acceptance length tau (1 + accepted / verification steps) and per-position acceptance,
    measured by serving the drafter exactly as users will (llama.cpp counters): greedy drafts at T=0,
    drafts sampled from the drafter (`--spec-draft-sample`, rejection sampling) at T > 0."""
    llm = LLM(target_dir, draft_model=draft_dir, spec_type=spec_type, n_parallel=min(8, max(len(prompts), 1)),
              spec_draft_n_max=n_max, spec_draft_sample=temperature > 0)
    params = [SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed + i)
              for i in range(len(prompts))]
    outs = llm.generate(prompts, params)
    stats = llm.engine.driver.stats_dict()[spec_type]
    steps = max(stats["n_call_accept"], 1)
    return {"tau": 1 + stats["n_acc_tokens"] / steps, "n_max": n_max, "temperature": temperature,
            "acceptance_per_position": [round(c / steps, 4) for c in stats["n_acc_per_pos"]],
            "drafted": stats["n_gen_tokens"], "accepted": stats["n_acc_tokens"], "prompts": len(prompts),
            "generated_tokens": sum(len(o.token_ids) for o in outs)}


def served_acceptance(job: "DrafterJob", spec_type: str) -> dict:
    """The card's measurements: acceptance at T=0 ("acceptance") and at T=1 ("acceptance_t1")."""
    prompts = eval_prompts(job.eval_samples)
    return {key: measure_acceptance(job.target_dir, spec_type, job.out_dir, prompts, temperature=t)
            for key, t in (("acceptance", 0.0), ("acceptance_t1", 1.0))}


def acceptance_section(summary: dict) -> str:
    """The card's "Measured acceptance" section, from served_acceptance's records in `summary`."""
    records = [summary[k] for k in ("acceptance", "acceptance_t1") if k in summary]
    first = records[0]
    rows = "\n".join(f"| T={a['temperature']:g}{' (drafts sampled, rejection sampling)' if a['temperature'] else ''} | "
                     f"{a['tau']:.2f} | {', '.join(f'{p:.3f}' for p in a['acceptance_per_position'])} | "
                     f"{a['drafted']} / {a['accepted']} |" for a in records)
    return f"""## Measured acceptance

On {first['prompts']} held-out prompts of the training data set (their prompts only; the
target continues them), `--spec-draft-n-max {first['n_max']}`, measured by serving this folder with
specserve:

| temperature | tau (mean acceptance length) | acceptance per draft position | drafted / accepted tokens |
|---|---|---|---|
{rows}

tau counts the target's own token: 1 + accepted draft tokens per verification step
(llama.cpp's `#mean acc len`). `benchmarks/method_table.py` compares all methods.
"""


def usage(job: DrafterJob, spec_type: str) -> str:
    """The generate command that serves the trained drafter (no -m for the bundled target)."""
    from ..llm import BUNDLED_MODEL
    model = "" if job.target_dir.resolve() == BUNDLED_MODEL.resolve() else f"-m {job.target_dir} "
    return f"specserve generate {model}-md {job.out_dir} --spec-type {spec_type} -p 'def fibonacci(n):'"


def eval_prompts(samples, limit: int = 16, max_len: int = 384) -> list[list[int]]:
    return [list(map(int, s.tokens[:s.n_prompt][-max_len:])) for s in samples[:limit] if s.n_prompt > 0]


def write_card(out_dir: Path, title: str, intro: str, rows: list[tuple[str, str]], job: DrafterJob,
               summary: dict, usage: str) -> None:
    """README.md model card: what it is, how it was trained, and its measured acceptance."""
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    text = f"""# {title}

{intro}

| | |
|---|---|
{table}

{acceptance_section(summary)}
## Training

```
{job.command}
```

Data: `{job.data_path}`, {len(job.train_samples)} target-regenerated samples for training,
{len(job.eval_samples)} held out. {summary['steps']} steps of {job.batch_size} windows of up to
{job.seq_len} tokens in {summary['minutes']:.1f} minutes on a 2-core CPU; final training metrics:
{", ".join(f"{k} {v:.3f}" for k, v in summary['final_metrics'].items())}.

## Use

```
{usage}
```
"""
    (out_dir / "README.md").write_text(text, encoding="utf-8")
