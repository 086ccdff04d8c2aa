"""Plots `lorakv bench memory`'s CSVs: KV bytes and the ratio against N full caches per mode
(memory.png), the aggregate decode tokens/s of every mode per context length (latency.png),
and an aLoRA reply's base rows at commit against in each decode step (alora_reply.png)."""
import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def finish_bars(fig, ax, ylabel: str, title: str, path: Path) -> None:
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_decode(d: Path) -> None:
    rows = [r for r in csv.DictReader(open(d / "latency.csv")) if r["metric"] == "decode_aggregate"]
    lengths = sorted({int(r["context_tokens"]) for r in rows})
    if not lengths:
        return
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, ax = plt.subplots(figsize=(2.2 * len(modes) + 2, 4.5))
    width = 0.8 / len(lengths)
    for i, t in enumerate(lengths):
        by_mode = {r["mode"]: float(r["tokens_per_second"]) for r in rows if int(r["context_tokens"]) == t}
        xs = [k + i * width for k in range(len(modes))]
        ax.bar(xs, [by_mode.get(m, 0.0) for m in modes], width, label=f"{t}-token context")
    ax.set_xticks([k + width * (len(lengths) - 1) / 2 for k in range(len(modes))], modes, rotation=20, ha="right")
    finish_bars(fig, ax, "aggregate decode tokens/s",
                "8 agents decoding on one shared context (one agent alone for comparison)", d / "latency.png")


def plot_alora_reply(d: Path) -> None:
    rows = list(csv.DictReader(open(d / "alora_reply.csv")))
    if not rows:
        return
    lengths = [int(r["context_tokens"]) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    width = 0.2
    xs = range(len(rows))
    reply_rows = [float(r["reply_rows"]) for r in rows]
    ax.bar([x - 1.5 * width for x in xs], [1e3 * float(r["commit_seconds_per_row"]) for r in rows], width,
           label="aLoRA: commit pass (batch)")
    ax.bar([x - 0.5 * width for x in xs], [1e3 * float(r["base_row_in_step_seconds"]) for r in rows], width,
           label="aLoRA: a base row beside each decode step")
    # Writer author: the commit and the work it leaves, per reply row; the fast form adds its
    # decode steps' extra time (the rows written twice) to its commit.
    ax.bar([x + 0.5 * width for x in xs], [1e3 * float(r["author_plain_commit_seconds"]) / n for r, n in zip(rows, reply_rows)],
           width, label="writer author, plain: commit pass")
    fast = [1e3 * (float(r["author_fast_commit_seconds"]) / n + float(r["author_fast_step_seconds"]) - float(r["author_plain_step_seconds"]))
            for r, n in zip(rows, reply_rows)]
    ax.bar([x + 1.5 * width for x in xs], fast, width, label="writer author, fast: commit + extra step time")
    ax.set_xticks(list(xs), [f"{t}-token context" for t in lengths])
    finish_bars(fig, ax, "ms per reply row", "A reply's rows: at commit or while it is generated", d / "alora_reply.png")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    d = Path(p.parse_args().dir)
    if (d / "latency.csv").exists():
        plot_decode(d)
    if (d / "alora_reply.csv").exists():
        plot_alora_reply(d)
    if not (d / "memory.csv").exists():
        return
    rows = [r for r in csv.DictReader(open(d / "memory.csv")) if r["layout"] == "per_layer" and r.get("eviction", "none") == "none"]
    for r in rows:  # aLoRA twins: their own lines
        if r.get("adapters", "standard") == "alora":
            r["mode"] += " (aLoRA)"
    lengths = sorted({int(r["tokens"]) for r in rows})
    fig, axes = plt.subplots(2, len(lengths), figsize=(5 * len(lengths), 8), squeeze=False)
    for col, t in enumerate(lengths):
        sel = [r for r in rows if int(r["tokens"]) == t]
        for mode in ["full", "full_shared", "base_shared", "base_lr_shared", "full (aLoRA)", "base_lr_shared (aLoRA)"]:
            m = sorted((int(r["agents"]), id(r), r) for r in sel if r["mode"] == mode)
            m = [(a, r) for a, _, r in m]
            if not m:
                continue
            n = [a for a, _ in m]
            axes[0][col].plot(n, [int(r["kv_bytes_measured"]) / 2**20 for _, r in m], marker="o", label=mode)
            axes[1][col].plot(n, [float(r["ratio_vs_n_full_caches"]) for _, r in m], marker="o", label=mode)
        axes[0][col].set_title(f"KV bytes in use, T = {t} tokens")
        axes[0][col].set_ylabel("MiB (measured from the pools)")
        axes[1][col].set_title(f"N full caches / mode, T = {t}")
        axes[1][col].set_ylabel("ratio")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xlabel("agents N")
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(d / "memory.png", dpi=110)


if __name__ == "__main__":
    main()
