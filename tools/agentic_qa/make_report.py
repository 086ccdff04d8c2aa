#!/usr/bin/env python3
"""Merge the evaluation CSVs and write the markdown tables of REPORT.md's results section.

Reads the teacher-forced parts (evaluate_roles.py outputs) and the episode CSVs
(run_episodes.py outputs), writes the merged eval.csv and episodes.csv, and prints
markdown tables (base vs adapter per role and metric, 95% Wilson intervals; episode
success) for the report.

usage: make_report.py --eval PART.csv [PART.csv ...] --episodes EP.csv [...] --out-dir DIR
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROLES, wilson  # noqa: E402


def read(paths: list[Path]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for p in paths:
        with open(p, newline="", encoding="utf-8") as f:
            rows.extend(csv.DictReader(f))
    return rows


def write(rows: list[dict[str, str]], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def fmt(r: dict[str, str]) -> str:
    return f"{float(r['accuracy']):.3f} [{float(r['ci95_low']):.3f}, {float(r['ci95_high']):.3f}] ({r['correct']}/{r['n']})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", type=Path, nargs="+", required=True)
    ap.add_argument("--episodes", type=Path, nargs="*", default=[])
    ap.add_argument("--out-dir", type=Path, required=True)
    args = ap.parse_args()

    ev = read(args.eval)
    write(ev, args.out_dir / "eval.csv")
    base = {(r["role"], r["metric"]): r for r in ev if r["model"] == "base"}
    sets = sorted({r["set"] for r in ev if r["model"] == "adapter"}, key=lambda s: (s != "qv_shared_a", s))
    print("| role | metric | base | " + " | ".join(sets) + " | separated |")
    print("|---|---|---|" + "---|" * len(sets) + "---|")
    keys = sorted(base, key=lambda k: (ROLES.index(k[0]), k[1]))
    for role, metric in keys:
        b = base[(role, metric)]
        cells, sep = [], []
        for s in sets:
            a = next((r for r in ev if r["set"] == s and r["role"] == role and r["metric"] == metric), None)
            cells.append(fmt(a) if a else "-")
            if a:
                sep.append("yes" if float(a["ci95_low"]) > float(b["ci95_high"]) else "NO")
        print(f"| {role} | {metric} | {fmt(b)} | " + " | ".join(cells) + f" | {'/'.join(sep)} |")

    if args.episodes:
        ep = read(args.episodes)
        write(ep, args.out_dir / "episodes.csv")
        print()
        print("| set | episodes | task success | finished | verdict agrees (finished) | planner/actor consistent |")
        print("|---|---|---|---|---|---|")
        for s in sorted({r["set"] for r in ep}, key=lambda s: (s != "qv_shared_a", s)):
            rows = [r for r in ep if r["set"] == s]
            cells = []
            for key in ("success", "finished", "verdict_agrees", "planner_actor_consistent"):
                sel = [r for r in rows if key != "verdict_agrees" or r["finished"] == "1"]
                k, n = sum(int(r[key]) for r in sel), len(sel)
                lo, hi = wilson(k, n)
                cells.append(f"{k / max(1, n):.3f} [{lo:.3f}, {hi:.3f}] ({k}/{n})")
            print(f"| {s} | {len(rows)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
