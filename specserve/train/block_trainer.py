"""Training DFlash and DSpark drafters for a target (docs/reference/dflash-dspark.md §4).

Per step: a batch of target-regenerated sequences; the frozen target runs once over them
(taps for the draft's context, final-normed states for the target's own next-token
distribution); random anchors per sequence; ONE draft forward over all blocks with the
per-anchor visibility mask; losses on the valid draft positions (block_losses.py). The draft
shares the target's embedding and lm_head (frozen, never copied). Both methods use the
anchor-first layout and are written in the DeepSpec format (`sample_from_anchor` explicit).
Checkpoints (model, optimizer, schedule) are written every `checkpoint_every` steps and a run
restarted with the same output folder resumes from the last one; the data order and anchors
are a function of (seed, step), so a resumed run sees what an uninterrupted one would, and under
torchrun every rank builds the same global batch and trains on its share of the rows
(data_parallel.py): any world size takes the same steps, and a run resumes at any world size.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..errors import OptionError
from ..models.block_drafter import BlockDrafter, save_block_drafter
from ..models.block_drafter_format import ANCHOR_FIRST, new_block_drafter_config
from ..models.tokenizer import Tokenizer
from ..models.transformer import CausalLM
from ..speculative.markov_chain import teacher_prev_tokens
from .block_anchors import BlockBatch, make_block_batch
from .block_losses import LOSS_WEIGHTS, acceptance_estimates, block_losses
from .data_parallel import DataParallel
from .methods import BLOCK_METHODS, canonical_method

log = logging.getLogger("specserve.train")


@dataclass
class BlockTrainConfig:
    method: str
    target_dir: str
    out_dir: str
    data_path: str | None = None       # a regen_data file (built from the target if missing)
    data_samples: int = 0              # when building the data file: how many samples (0 = its default)
    steps: int = 1000
    batch_size: int = 4
    max_len: int = 512
    anchors: int = 64
    block_size: int = 8
    num_layers: int = 2
    num_taps: int = 3
    tap_layers: tuple[int, ...] = ()   # explicit target layers read; empty: num_taps by build_target_layer_ids
    markov_rank: int = 64              # DSpark only
    confidence_head: bool = True       # DSpark only
    draft_arch: str = "qwen3"          # the draft layers' family: qwen3, llama or qwen2
    lr: float = 6e-4
    warmup: float = 0.04
    gamma: float = 4.0
    clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 100
    eval_samples: int = 32
    log_every: int = 10
    threads: int = 0
    init_from_target: bool = True      # start from the target's last layers (init_from_target)
    command: str = ""                  # the command line, recorded in the model card


def _lr_factor(step: int, cfg: BlockTrainConfig) -> float:
    warm = max(1, int(cfg.warmup * cfg.steps))
    if step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, cfg.steps - warm)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def init_from_target(model: BlockDrafter, target: CausalLM) -> bool:
    """Start the draft from the target's top: draft layer i <- target layer T-L+i, the final norm <-
    the target's, and fc <- a copy of the last tap, normed by the first copied layer's input norm,
    so the first draft layer initially sees the context keys/values the target's own layer computes
    from that tap. Training then adapts the stack to the block task. Only when the layers are of the
    same family with the same tensors and shapes (e.g. not a llama draft for a Qwen3 target);
    otherwise the draft keeps its random initialisation. Returns whether the layers were copied."""
    n_target, n_draft = target.config.num_hidden_layers, len(model.layers)
    first = n_target - n_draft
    why = None
    if first < 0:
        why = f"the draft has {n_draft} layers, the target only {n_target}"
    elif model.cfg.family != target.config.family:
        why = f"a {model.cfg.family} draft for a {target.config.family} target"
    else:
        for i, layer in enumerate(model.layers):
            own, source = layer.state_dict(), target.model.layers[first + i].state_dict()
            if own.keys() != source.keys() or any(own[k].shape != source[k].shape for k in own):
                why = f"draft layer {i} and target layer {first + i} differ in tensors or shapes"
                break
    if why is not None:
        log.info("init from target skipped (%s): the draft starts from a random initialisation", why)
        return False
    hidden = target.config.hidden_size
    with torch.no_grad():
        model.norm.weight.copy_(target.model.norm.weight)
        for i, layer in enumerate(model.layers):
            layer.load_state_dict(target.model.layers[first + i].state_dict())
        model.fc.weight.zero_()
        model.fc.weight[:, -hidden:].copy_(torch.eye(hidden))
        model.hidden_norm.weight.copy_(target.model.layers[first].input_layernorm.weight)
    return True


class BlockTrainer:
    def __init__(self, cfg: BlockTrainConfig, samples: list | None = None, progress: bool = True,
                 dp: DataParallel = DataParallel()):
        cfg = replace(cfg, method=canonical_method(cfg.method))
        if cfg.method not in BLOCK_METHODS:
            raise OptionError(f"--method must be one of {', '.join(BLOCK_METHODS)}, got {cfg.method!r}")
        dp.check_batch(cfg.batch_size)
        self.cfg = cfg
        self.dp = dp
        self.progress = progress and dp.is_main
        self.out = Path(cfg.out_dir)
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        self.target = CausalLM.from_pretrained(cfg.target_dir, dtype="float32")
        self.samples = self._load_samples(samples)
        from .regen_data import samples_fingerprint
        self.data_fingerprint = samples_fingerprint(self.samples)
        self.train_set, self.eval_set = self._split()
        mask = self._mask_token_id()
        dspark = cfg.method == "draft-dspark"
        shape = new_block_drafter_config(
            self.target.config, block_size=cfg.block_size, num_layers=cfg.num_layers, mask_token_id=mask,
            target_layer_ids=list(cfg.tap_layers) or None, num_taps=cfg.num_taps,
            markov_rank=cfg.markov_rank if dspark else 0,
            confidence_head=dspark and cfg.confidence_head, layout=ANCHOR_FIRST, draft_arch=cfg.draft_arch,
            model_dir=self.out)
        self.model = BlockDrafter(shape)
        self.model.init_weights(seed=cfg.seed)
        if cfg.init_from_target:
            init_from_target(self.model, self.target)
        self.model.attach_target(self.target)
        self.weights = LOSS_WEIGHTS[cfg.method]
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: _lr_factor(s, cfg))
        self.step = 0
        self.train_losses = dp.wrap(self.model, lambda batch: self.losses(batch, dp.denominator))

    # ------------------------------------------------------------------ data
    def _load_samples(self, samples):
        if samples is not None:
            return samples
        if not self.cfg.data_path:
            raise OptionError("give the training data: --data FILE (made by specserve.train.regen_data, "
                              "built from the target if the file does not exist)")
        from . import regen_data
        path = Path(self.cfg.data_path)
        if path.exists():
            return regen_data.load_regen_dataset(path)
        kwargs = {"n_samples": self.cfg.data_samples} if self.cfg.data_samples else {}
        return regen_data.build_regen_dataset(self.cfg.target_dir, path, seed=self.cfg.seed, dp=self.dp, **kwargs)

    def _split(self):
        usable = [s for s in self.samples if len(s.tokens) - max(int(s.n_prompt), 0) >= 3]
        if not usable:
            raise OptionError("no training sample has at least 3 regenerated tokens")
        order = torch.randperm(len(usable), generator=torch.Generator().manual_seed(self.cfg.seed)).tolist()
        n_eval = min(self.cfg.eval_samples, len(usable) // 10)
        if n_eval < self.cfg.eval_samples:
            log.warning("--eval-samples %d: only %d of %d usable samples are held out for evaluation (at most a "
                        "tenth of the data)", self.cfg.eval_samples, n_eval, len(usable))
        return [usable[i] for i in order[n_eval:]], [usable[i] for i in order[:n_eval]]

    def _mask_token_id(self) -> int:
        tok_path = Path(self.cfg.target_dir) / "tokenizer.json"
        if tok_path.is_file():
            tok = Tokenizer(self.cfg.target_dir)
            for text in (tok.special.get("mask_token"), "<|mask|>", "<|MASK|>"):
                if tok.token_to_id(text) is not None:
                    return int(tok.token_to_id(text))
        raise OptionError(f"the target {self.cfg.target_dir} has no mask token (tokenizer_config.json "
                          f"mask_token or <|mask|>): block drafters need an unused embedding row")

    def _sequences(self, samples) -> list[tuple[torch.Tensor, int]]:
        out = []
        for s in samples:
            tokens = torch.as_tensor(s.tokens, dtype=torch.int64)[:self.cfg.max_len]
            out.append((tokens, int(s.n_prompt)))
        return out

    def _batch_samples(self, step: int):
        per_epoch = max(1, len(self.train_set) // self.cfg.batch_size)
        epoch, index = divmod(step, per_epoch)
        order = torch.randperm(len(self.train_set),
                               generator=torch.Generator().manual_seed(self.cfg.seed * 1000 + epoch)).tolist()
        chosen = order[index * self.cfg.batch_size:(index + 1) * self.cfg.batch_size]
        return [self.train_set[i] for i in chosen]

    def make_batch(self, samples, seed: int) -> BlockBatch:
        shape = self.model.config
        return make_block_batch(self._sequences(samples), self.cfg.anchors, shape.block_size, shape.max_drafts,
                                shape.mask_token_id, torch.Generator().manual_seed(seed))

    # ------------------------------------------------------------------ one forward
    def losses(self, batch: BlockBatch, denominator=None):
        model, target = self.model, self.target
        ids = model.config.target_layer_ids
        with torch.no_grad():
            final, taps = target.forward_full(batch.tokens, taps=ids)
            feats = torch.cat([taps[i] for i in ids], dim=-1)
        hidden = model.forward_train(feats, batch.anchors, batch.block_tokens)
        rows = model.draft_rows(hidden)[batch.valid]                                   # [M, H]
        n = batch.valid.shape[-1]
        positions = torch.arange(n).expand_as(batch.valid)[batch.valid]
        labels = batch.labels[batch.valid]
        logits = F.linear(rows, self.target.lm_head_weight).float()
        prev = teacher_prev_tokens(batch.block_tokens[:, :, 0], batch.labels)[batch.valid]
        if model.markov_head is not None:
            logits = logits + model.markov_head(prev).float()
        with torch.no_grad():
            target_pos = (batch.anchors.unsqueeze(-1) + torch.arange(n)).clamp(max=batch.tokens.shape[1] - 1)
            target_rows = final.gather(1, target_pos.view(final.shape[0], -1, 1).expand(-1, -1, final.shape[-1]))
            target_logits = self.target.logits(target_rows.view(*batch.valid.shape, -1)[batch.valid])
        conf = model.confidence_logits(rows, prev) if model.confidence_head is not None else None
        total, metrics, accept, match = block_losses(logits, target_logits, labels, positions, conf, self.weights,
                                                     self.cfg.gamma, denominator)
        block_accept = torch.zeros(batch.valid.shape)
        block_match = torch.zeros(batch.valid.shape)
        block_accept[batch.valid] = accept
        block_match[batch.valid] = match
        metrics.update(acceptance_estimates(block_accept, block_match, batch.valid))
        return total, metrics

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.out / "checkpoints" / "last.pt"

    def save_checkpoint(self) -> None:
        path = self.checkpoint_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"step": self.step, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(), "config": asdict(self.cfg),
                    "data": self.data_fingerprint}, tmp)
        os.replace(tmp, path)

    def maybe_resume(self) -> bool:
        if not self.checkpoint_path.is_file():
            return False
        state = torch.load(self.checkpoint_path, weights_only=False)
        saved = state["config"]
        for key in ("method", "block_size", "num_layers", "num_taps", "tap_layers", "markov_rank", "confidence_head",
                    "draft_arch", "steps", "batch_size", "seed"):
            was = saved.get(key, getattr(BlockTrainConfig, key, None))
            if (canonical_method(was) if key == "method" else was) != getattr(self.cfg, key):
                raise OptionError(f"{self.checkpoint_path} was made with {key}={saved.get(key)!r}, this run has "
                                  f"{getattr(self.cfg, key)!r}: use another --out folder or the same settings")
        if state.get("data", self.data_fingerprint) != self.data_fingerprint:
            raise OptionError(f"{self.checkpoint_path} was trained on other data than {self.cfg.data_path or 'these samples'}"
                              f": resume with the data file it started with, or use another --out folder")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        return True

    # ------------------------------------------------------------------ loop
    def evaluate(self) -> dict:
        if not self.eval_set:
            return {}
        self.model.eval()
        sums, counts = {}, {}
        with torch.no_grad():
            for i in range(0, len(self.eval_set), self.cfg.batch_size):
                _, metrics = self.losses(self.make_batch(self.eval_set[i:i + self.cfg.batch_size], 12345 + i))
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
        self.model.train()
        return {k: sums[k] / counts[k] for k in sums}

    def _logged_seconds(self) -> float:
        """The training time train_log.jsonl recorded last (runs before a resume)."""
        seconds = 0.0
        path = self.out / "train_log.jsonl"
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                seconds = json.loads(line).get("elapsed_s", seconds)
        return seconds

    def _log(self, record: dict) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / "train_log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def train(self, stop_after: int | None = None) -> dict:
        """Train to cfg.steps (resuming from the last checkpoint) and export; `stop_after` ends this
        call after that many steps with a checkpoint instead (a time-boxed or interrupted run)."""
        cfg = self.cfg
        resumed = self.maybe_resume()
        self.model.train()
        t0 = time.perf_counter() - (self._logged_seconds() if resumed else 0.0)     # wall time over every run
        running: dict[str, float] = {}
        bar = tqdm(total=cfg.steps, initial=self.step, disable=not self.progress, desc=f"train {cfg.method}",
                   dynamic_ncols=True)
        if resumed and self.dp.is_main:
            bar.write(f"resumed from {self.checkpoint_path} at step {self.step}")
        first = self.step
        while self.step < cfg.steps:
            if stop_after is not None and self.step - first >= stop_after:
                self._on_main(self.save_checkpoint)
                bar.close()
                return {}
            batch = self.make_batch(self._batch_samples(self.step), cfg.seed * 7919 + self.step)
            total, metrics = self.train_losses(batch.rows(self.dp.share(cfg.batch_size)))
            metrics = self.dp.average(metrics)
            self.optimizer.zero_grad(set_to_none=True)
            total.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip))
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
            for k, v in metrics.items():
                running[k] = running.get(k, 0.0) * 0.9 + v * 0.1 if k in running else v
            bar.update(1)
            bar.set_postfix(loss=f"{running['loss']:.3f}", acc0=f"{running.get('accept_rate@0', 0):.2f}",
                            tau=f"{running.get('tau_prob', 1):.2f}")
            if (self.step % cfg.log_every == 0 or self.step == cfg.steps) and self.dp.is_main:
                self._log({"step": self.step, "lr": self.scheduler.get_last_lr()[0], "grad_norm": grad_norm,
                           "elapsed_s": time.perf_counter() - t0, **metrics})
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps:
                self._on_main(self._checkpoint_and_evaluate, bar)
        bar.close()
        final = self._on_main(self.evaluate) or {}
        self._on_main(self.export, final, time.perf_counter() - t0)
        return final

    def _on_main(self, fn, *args):
        """fn(*args) on rank 0 only (files, evaluation); the other ranks wait for it."""
        result = fn(*args) if self.dp.is_main else None
        self.dp.barrier()
        return result

    def _checkpoint_and_evaluate(self, bar) -> None:
        self.save_checkpoint()
        evaluation = self.evaluate()
        if evaluation:
            self._log({"step": self.step, "eval": evaluation})
            bar.write(f"step {self.step}: eval tau_prob {evaluation.get('tau_prob', 1):.3f} "
                      f"tau_greedy {evaluation.get('tau_greedy', 1):.3f} "
                      f"accept_rate@0 {evaluation.get('accept_rate@0', 0):.3f}")

    def export(self, evaluation: dict, seconds: float) -> Path:
        n_tokens = sum(len(s.tokens) for s in self.train_set)
        summary = {"config": asdict(self.cfg), "eval": evaluation, "train_samples": len(self.train_set),
                   "train_tokens": n_tokens, "eval_samples": len(self.eval_set), "wall_seconds": seconds}
        save_block_drafter(self.model, self.out, torch.bfloat16, tokenizer_from=self.cfg.target_dir)
        (self.out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
        (self.out / "README.md").write_text(model_card(self.model, summary), encoding="utf-8")
        return self.out


def model_card(model: BlockDrafter, summary: dict) -> str:
    cfg, shape, ev = summary["config"], model.config, summary["eval"]
    n_params = sum(p.numel() for p in model.parameters())
    name = "DSpark" if shape.markov_rank else "DFlash"
    def per_position(key: str) -> str:
        return ", ".join(f"{ev[f'{key}@{k}']:.3f}" for k in range(shape.max_drafts) if f"{key}@{k}" in ev)
    minutes = summary.get("wall_seconds", 0.0) / 60
    return f"""# {name} drafter for `{Path(cfg['target_dir']).name}`

A {name} block drafter (`--spec-type draft-{name.lower()}`) trained by `specserve train-draft` for the
target `{cfg['target_dir']}`. DeepSpec format, anchor-first layout: one draft forward gives
{shape.max_drafts} drafts from a block of {shape.block_size} (`--spec-draft-n-max {shape.max_drafts}`).

| | |
|---|---|
| draft layers | {shape.backbone.num_hidden_layers} {shape.backbone.family}-style (hidden {shape.backbone.hidden_size}, {shape.backbone.num_attention_heads} heads, {shape.backbone.num_key_value_heads} KV heads, MLP {shape.backbone.intermediate_size}) |
| target taps | outputs of layers {shape.target_layer_ids} |
| Markov head | {f"rank {shape.markov_rank}" if shape.markov_rank else "none"} |
| confidence head | {"yes (input: final hidden + Markov feature)" if shape.has_confidence_head else "no"} |
| mask token id | {shape.mask_token_id} |
| parameters | {n_params / 1e6:.2f} M (the embedding and lm_head are the target's and are not stored) |
| training data | {summary['train_samples']} target-regenerated samples ({summary['train_tokens']} tokens), {summary['eval_samples']} held out |
| training | {cfg['steps']} steps x {cfg['batch_size']} sequences (max {cfg['max_len']} tokens, {cfg['anchors']} anchors each), AdamW lr {cfg['lr']}, warmup {cfg['warmup']}, cosine, clip {cfg['clip']}, gamma {cfg['gamma']}; {minutes:.0f} minutes with {cfg['threads'] or 'all'} thread(s) |
| loss | {"0.1 CE + 0.9 L1 + 1.0 confidence BCE" if name == "DSpark" else "CE"}, position-decayed |

Held-out estimates after training, per block position given the positions before it are right:
- T=0 (the draft's argmax is the target's): {per_position('match_rate')}; tau {ev.get('tau_greedy', float('nan')):.3f};
- T=1 (rejection sampling accepts, 1 - TV distance): {per_position('accept_rate')}; tau {ev.get('tau_prob', float('nan')):.3f}.

Command:

```
{cfg.get('command') or 'specserve train-draft ...'}
```
"""
