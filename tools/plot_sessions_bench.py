"""Plots `lorakv bench sessions`' CSV: aggregate tokens/s and time to first token against the
number of concurrent sessions, per mode and side (scheduler, sequential, driver); medians
over the repetitions."""
import argparse
import csv
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    d = Path(p.parse_args().dir)
    rows = list(csv.DictReader(open(d / "sessions.csv")))
    modes = sorted({r["mode"] for r in rows})
    fig, axes = plt.subplots(2, len(modes), figsize=(5 * len(modes), 8), squeeze=False)
    for col, mode in enumerate(modes):
        for side in ["scheduler", "sequential", "driver"]:
            sel = [r for r in rows if r["mode"] == mode and r["side"] == side]
            counts = sorted({int(r["sessions"]) for r in sel})
            rate = [statistics.median(float(r["tokens_per_s"]) for r in sel if int(r["sessions"]) == s) for s in counts]
            ttft = [statistics.median(float(r["ttft_p50_s"]) for r in sel if int(r["sessions"]) == s) for s in counts]
            axes[0][col].plot(counts, rate, marker="o", label=side)
            axes[1][col].plot(counts, ttft, marker="o", label=side)
        axes[0][col].set_title(f"aggregate tokens/s, {mode}")
        axes[1][col].set_title(f"time to first token p50, {mode}")
        axes[1][col].set_ylabel("seconds")
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent sessions (3 agents each)")
            ax.legend()
    fig.tight_layout()
    fig.savefig(d / "sessions.png", dpi=110)


if __name__ == "__main__":
    main()
