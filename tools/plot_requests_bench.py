"""Plots `lorakv bench requests`' CSV: time to first token (idle and busy engine) and
aggregate tokens/s of the request handle against the sessions API, per repetition (the
sides alternate in order)."""
import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    d = Path(p.parse_args().dir)
    rows = list(csv.DictReader(open(d / "requests.csv")))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    for ax, measure, title, scale in [
        (axes[0], "ttft_s", "time to first token, idle engine (ms)", 1e3),
        (axes[1], "busy_ttft_s", "time to first token, engine decoding others (ms)", 1e3),
        (axes[2], "tokens_per_s", "aggregate tokens/s, concurrent requests", 1.0),
    ]:
        for side in ["handle", "session"]:
            sel = [r for r in rows if r["measure"] == measure and r["side"] == side]
            ax.plot([int(r["repetition"]) for r in sel], [float(r["value"]) * scale for r in sel], marker="o", label=side)
        ax.set_title(title)
        ax.set_xlabel("repetition")
        ax.legend()
    fig.tight_layout()
    fig.savefig(d / "requests.png", dpi=110)


if __name__ == "__main__":
    main()
