"""Plots `lorakv bench eviction`'s CSVs: quality against KV memory for every policy.
Left: perplexity as a ratio to the full cache (policy none) against the KV bytes held after
a step (eviction_perplexity.csv). Right: retrieval success (exact match of the code) against
the same, for the retrieval grid of the CSV's newest row (eviction_retrieval.csv). Each
policy is a line over its budgets; the full cache is a black star. Writes eviction.png into
--dir. A CSV that is missing leaves its panel empty, with a note."""
import argparse
import csv
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20
GRID_FIELDS = ("cases", "depths", "haystack_tokens", "seed")


def read_rows(path: Path) -> list:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def newest_grid(rows: list) -> list:
    """The rows of the grid the last row ran: a rerun with other flags appends another grid."""
    if not rows:
        return rows
    last = tuple(rows[-1][k] for k in GRID_FIELDS)
    return [r for r in rows if tuple(r[k] for k in GRID_FIELDS) == last]


def by_policy(rows: list) -> dict:
    """policy -> rows sorted by KV bytes (the last row of a (policy, budget) wins)."""
    latest = {(r["policy"], r["budget"]): r for r in rows}
    out = {}
    for (policy, _), r in latest.items():
        out.setdefault(policy, []).append(r)
    for policy in out:
        out[policy].sort(key=lambda r: float(r["kv_bytes_after_step"]))
    return out


def draw(ax, rows: list, quality, ylabel: str, title: str) -> None:
    if not rows:
        ax.text(0.5, 0.5, "no rows yet", ha="center", va="center", transform=ax.transAxes)
    for policy, sel in sorted(by_policy(rows).items()):
        x = [float(r["kv_bytes_after_step"]) / MIB for r in sel]
        y = [quality(r) for r in sel]
        if policy == "none":
            ax.plot(x, y, "k*", markersize=12, label="full cache")
            continue
        ax.plot(x, y, marker="o", label=policy)
        for r, xi, yi in zip(sel, x, y):
            ax.annotate(r["budget"], (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("KV MiB held after a step (labels: budget, share of the context)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True, help="the folder with the bench's CSVs; eviction.png goes there")
    d = Path(p.parse_args().dir)
    ppl = read_rows(d / "eviction_perplexity.csv")
    full = [float(r["ppl"]) for r in ppl if r["policy"] == "none"]
    ppl_ratio = (lambda r: float(r["ppl"]) / full[-1]) if full else (lambda r: float(r["ppl"]))
    retrieval = newest_grid(read_rows(d / "eviction_retrieval.csv"))

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    draw(axes[0], ppl, ppl_ratio, "perplexity / full cache's" if full else "perplexity",
         "perplexity of the license texts (lower is better)")
    grid = f"{retrieval[-1]['cases']} cases, depths {retrieval[-1]['depths']}, " \
           f"{retrieval[-1]['haystack_tokens']}-token haystack" if retrieval else "no rows"
    draw(axes[1], retrieval, lambda r: float(r["success_rate"]), "exact-match success",
         f"retrieval of a fact ({grid})")
    axes[1].set_ylim(-0.05, 1.05)
    fig.tight_layout()
    fig.savefig(d / "eviction.png", dpi=110)
    draw_streaming(d)
    draw_kv_dtype(d)


def draw_kv_dtype(d: Path) -> None:
    """eviction_kv_dtype.png: the base's dtype (the kv_dtype part), if it ran: mean KL against the
    float32 cache and perplexity against KV bytes, and the composed figure's ratios."""
    rows = read_rows(d / "eviction_kv_dtype.csv")
    composed = read_rows(d / "eviction_composed.csv")
    if not rows:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, r in enumerate(rows):
        mib = float(r["kv_bytes_peak_after_step"] or 0) / 2**20
        label = f"{r['kv_dtype']}, {r['policy']}" + ("" if r["policy"] == "none" else f" {float(r['budget']):g}")
        axes[0].scatter(mib, float(r["ppl"]), s=40)
        kl = f", KL {float(r['mean_kl_vs_float32']):.5f}" if r["mean_kl_vs_float32"] else ""
        axes[0].annotate(label + kl, (mib, float(r["ppl"])), fontsize=8, xytext=(4, 4 if i % 4 < 2 else -12),
                         textcoords="offset points")
    axes[0].set_xlabel("KV MiB after a step")
    axes[0].set_ylabel("perplexity")
    axes[0].set_title("base dtype: perplexity, KL vs float32")
    axes[0].grid(alpha=0.3)
    if composed:
        names = [r["variant"] for r in composed]
        ratios = [float(r["ratio"]) for r in composed]
        axes[1].barh(names, ratios, color="C2")
        for i, x in enumerate(ratios):
            axes[1].text(x, i, f" {x:.1f}x", va="center", fontsize=9)
        axes[1].set_xlabel(f"less KV than {composed[0]['agents']} full float32 caches")
        axes[1].set_title(f"{composed[0]['agents']} agents, {composed[0]['tokens']}-token trajectory")
    fig.tight_layout()
    fig.savefig(d / "eviction_kv_dtype.png", dpi=110)


def r0_keys(rows: list) -> set:
    """The columns of a CSV's rows (older streaming CSVs lack trajectory_bytes)."""
    return set(rows[0].keys()) if rows else set()


def draw_streaming(d: Path) -> None:
    """eviction_streaming.png: memory over one long session (the streaming part), if it ran."""
    rows = read_rows(d / "eviction_streaming.csv")
    if not rows:
        return
    tokens = [int(r["tokens"]) for r in rows]
    mib = lambda key: [int(r[key]) / 2**20 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(tokens, mib("resident_bytes"), marker="o", label="process resident memory")
    ax.plot(tokens, mib("pool_reserved_bytes"), linestyle="--", label="KV pools reserved (sized from the budget)")
    ax.plot(tokens, mib("kv_bytes_in_use"), marker=".", label="KV in use after the chunk's steps")
    ax.plot(tokens, mib("host_metadata_bytes"), marker=".", label="cache host metadata")
    if "trajectory_bytes" in r0_keys(rows):
        ax.plot(tokens, mib("trajectory_bytes"), linestyle=":", label="the trajectory's token ids (kept whole)")
    r0 = rows[0]
    ax.set_xlabel("tokens appended")
    ax.set_ylabel("MiB")
    ax.set_title(f"{r0['policy']} at {r0['budget']} tokens, {r0['readers']} agents, chunks of {r0['chunk']}")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "eviction_streaming.png", dpi=110)


if __name__ == "__main__":
    main()
