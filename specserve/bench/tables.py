"""Tables as text (llama.cpp's layout: left-justified columns, two-space separators, a dashed
rule under the header) or Markdown, and the number formats the bench commands share."""
from __future__ import annotations


def speed(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def seconds(value) -> str:
    return "n/a" if value is None else f"{value:.3f}s"


def ratio(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def times(value) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def length(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(headers, widths)).rstrip(),
             "-" * (sum(widths) + 2 * (len(widths) - 1))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    return "\n".join([line(headers), "|" + "|".join("---" for _ in headers) + "|"] + [line(r) for r in rows])


SUMMARY_HEADERS = ["category", "requests", "turns", "failed", "avg_prompt_t/s", "avg_pred_t/s", "avg_latency",
                   "avg_ttft", "accept_rate", "mean_acc_len"]


def summary_rows(summary: dict) -> list[list[str]]:
    return [[category, str(s["requests"]), str(s["turns"]), str(s["failed"]), speed(s["avg_prompt_t_s"]),
             speed(s["avg_pred_t_s"]), seconds(s["avg_latency"]), seconds(s["avg_ttft"]), ratio(s["accept_rate"]),
             length(s["mean_acceptance_length"])] for category, s in summary.items()]
