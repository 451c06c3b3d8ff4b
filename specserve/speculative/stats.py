"""Speculative statistics: per-method counters and per-request counters, printed in
llama.cpp's current line formats (docs/reference/llamacpp-speculative.md §2)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ImplCounters:
    """Lifetime counters of one method (llama.cpp `common_speculative_impl`)."""
    n_call_begin: int = 0
    n_call_draft: int = 0
    n_call_accept: int = 0
    n_gen_drafts: int = 0
    n_acc_drafts: int = 0
    n_gen_tokens: int = 0
    n_acc_tokens: int = 0
    n_acc_per_pos: list[int] = field(default_factory=list)
    t_begin_us: float = 0.0
    t_draft_us: float = 0.0
    t_accept_us: float = 0.0

    def record_accept(self, n_accepted: int) -> None:
        if len(self.n_acc_per_pos) < n_accepted:
            self.n_acc_per_pos.extend([0] * (n_accepted - len(self.n_acc_per_pos)))
        for i in range(n_accepted):
            self.n_acc_per_pos[i] += 1
        if n_accepted > 0:
            self.n_acc_drafts += 1
            self.n_acc_tokens += n_accepted

    def line(self, name: str) -> str:
        s = (f"statistics {name:>16}: #calls(b,g,a) = {self.n_call_begin:4d} {self.n_call_draft:6d} "
             f"{self.n_call_accept:6d}, #gen drafts = {self.n_gen_drafts:6d}, #acc drafts = {self.n_acc_drafts:5d}, "
             f"#gen tokens = {self.n_gen_tokens:6d}, #acc tokens = {self.n_acc_tokens:5d}")
        if self.n_call_accept > 0:
            rates = ", ".join(f"{c / self.n_call_accept:.3f}" for c in self.n_acc_per_pos)
            s += f", #mean acc len = {1 + self.n_acc_tokens / self.n_call_accept:.2f}, #acc rate/pos = ({rates})"
        return s + (f", dur(b,g,a) = {self.t_begin_us / 1000:.3f}, {self.t_draft_us / 1000:.3f}, "
                    f"{self.t_accept_us / 1000:.3f} ms")

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["n_acc_per_pos"] = list(self.n_acc_per_pos)
        return d


@dataclass
class RequestDraftStats:
    """Per-request counters (llama-server `server_slot` stats)."""
    n_draft_tokens: int = 0        # drafted tokens (after truncation), summed over steps
    n_draft_accepted: int = 0
    n_verify_steps: int = 0        # steps that verified a non-empty draft
    accepted_per_pos: list[int] = field(default_factory=list)
    # draft length -> histogram of accepted lengths (index j = steps that accepted j tokens)
    histogram_by_draft_len: dict[int, list[int]] = field(default_factory=dict)

    def record(self, n_drafted: int, n_accepted: int) -> None:
        self.n_verify_steps += 1
        hist = self.histogram_by_draft_len.get(n_drafted)
        if hist is None:
            hist = self.histogram_by_draft_len[n_drafted] = [0] * (n_drafted + 1)
        hist[n_accepted] += 1
        self.n_draft_accepted += n_accepted
        if len(self.accepted_per_pos) < n_accepted:
            self.accepted_per_pos.extend([0] * (n_accepted - len(self.accepted_per_pos)))
        for i in range(n_accepted):
            self.accepted_per_pos[i] += 1

    @property
    def acceptance_rate(self) -> float:
        return self.n_draft_accepted / self.n_draft_tokens if self.n_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1 + self.n_draft_accepted / self.n_verify_steps if self.n_verify_steps else 1.0

    def per_position_rates(self, n_positions: int = 0) -> list[float]:
        counts = self.accepted_per_pos + [0] * max(0, n_positions - len(self.accepted_per_pos))
        steps = self.n_verify_steps
        return [c / steps if steps else 0.0 for c in counts]

    def acceptance_histogram(self, n_positions: int = 0) -> list[int]:
        """Index j = verify steps that accepted exactly j draft tokens (the bonus token excluded)."""
        size = max([n_positions, *self.histogram_by_draft_len]) + 1
        hist = [0] * size
        for by_len in self.histogram_by_draft_len.values():
            for j, count in enumerate(by_len):
                hist[j] += count
        return hist

    def vllm_metrics(self, num_spec_tokens: int) -> dict:
        """vLLM's per-request `metrics.speculative_decoding` object (plus per-position counts)."""
        return {
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.acceptance_rate,
            "acceptance_histogram": self.acceptance_histogram(num_spec_tokens),
            "acceptance_histogram_by_draft_length": {
                str(k): list(v) for k, v in sorted(self.histogram_by_draft_len.items())},
            "num_spec_steps": self.n_verify_steps,
            "num_accepted_draft_tokens": self.n_draft_accepted,
            "num_draft_tokens": self.n_draft_tokens,
            "num_spec_tokens": num_spec_tokens,
            "per_position_accepted": list(self.accepted_per_pos),
        }

    def lines(self, n_positions: int = 0) -> list[str]:
        """llama-server's per-request lines (printed only when something was drafted)."""
        if not self.n_draft_tokens:
            return []
        rates = ", ".join(f"{r:.3f}" for r in self.per_position_rates(n_positions))
        return [f"draft acceptance = {self.acceptance_rate:0.5f} ({self.n_draft_accepted:5d} accepted / "
                f"{self.n_draft_tokens:5d} generated), mean len = {self.mean_acceptance_length:5.2f}",
                f"     acc per pos = ({rates})"]

    def as_dict(self) -> dict:
        return {
            "drafted": self.n_draft_tokens,
            "accepted": self.n_draft_accepted,
            "verify_steps": self.n_verify_steps,
            "accepted_per_pos": list(self.accepted_per_pos),
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
        }
