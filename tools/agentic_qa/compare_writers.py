#!/usr/bin/env python3
"""Each shared mode's writers against each other, question by question, from `lorakv bench
episodes` CSVs (episodes_by_mode_SET.csv; several files may hold the modes of one set).

Per set and mode: the success of `full` and of each writer, McNemar's exact two-sided test of
every writer against `full` and of the newest writer (--writer, default author) against the
best of the others (the one that solves the most), KV bytes per episode and its saving
against the set's full caches (full_caches_bytes), and the agent and ordinal of the first
turn that differs from `full` (e.g. "actor 2": the actor's second turn). Writes a Markdown
table to stdout.

usage: compare_writers.py FILE... [--writer author]
"""
from __future__ import annotations

import argparse
import csv
import math
import re
from collections import Counter, defaultdict

TURN_START = re.compile(r" \| (?=\[(?:planner|actor|reflector|tool)\] )")
ROLE = re.compile(r"^\[(planner|actor|reflector|tool)\] ")


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p: the binomial test of min(b, c) in b + c at 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def first_break(ours: str, full: str) -> str:
    """The agent and its turn ordinal where `ours` first differs from `full` ("none": equal)."""
    a, b = TURN_START.split(ours), TURN_START.split(full)
    ordinals: Counter = Counter()
    for i in range(max(len(a), len(b))):
        turn = a[i] if i < len(a) else b[i]
        m = ROLE.match(turn)
        role = m.group(1) if m else "?"
        ordinals[role] += 1
        if i >= len(a) or i >= len(b) or a[i] != b[i]:
            return f"{role} {ordinals[role]}"
    return "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--writer", default="author")
    args = ap.parse_args()
    runs: dict = defaultdict(dict)  # (set, mode:writer) -> id -> row
    for path in args.files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                runs[(row["set"], row["mode"])][row["id"]] = row
    sets = sorted({s for s, _ in runs})
    print("| set | mode | writer | success | vs full: b / c, p | vs best other writer: b / c, p "
          "| KV bytes per episode | vs full caches | first turn that differs from full (top 3) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in sets:
        full = runs.get((s, "full"))
        if not full:
            continue
        modes = sorted({m.split(":")[0] for ss, m in runs if ss == s and ":" in m})
        for mode in modes:
            writers = {m.split(":")[1]: runs[(s, m)] for ss, m in runs if ss == s and m.startswith(mode + ":")}
            ids = sorted(set(full).intersection(*[set(r) for r in writers.values()]))
            ok = lambda rows, i: rows[i]["success"] == "1"
            others = [w for w in writers if w != args.writer]
            best = max(others, key=lambda w: sum(ok(writers[w], i) for i in ids)) if others else None
            for w in sorted(writers, key=lambda w: (w == args.writer, w)):
                rows = writers[w]
                wins = sum(ok(rows, i) for i in ids)
                b = sum(ok(full, i) and not ok(rows, i) for i in ids)
                c = sum(ok(rows, i) and not ok(full, i) for i in ids)
                vs_best = ""
                if w == args.writer and best is not None:
                    bb = sum(ok(writers[best], i) and not ok(rows, i) for i in ids)
                    cc = sum(ok(rows, i) and not ok(writers[best], i) for i in ids)
                    vs_best = f"{best}: {bb} / {cc}, p = {mcnemar_p(bb, cc):.2g}"
                kv = sum(int(rows[i]["kv_bytes"]) for i in ids) / len(ids)
                caches = sum(int(rows[i]["full_caches_bytes"]) for i in ids) / len(ids)
                breaks = Counter(first_break(rows[i]["transcript"], full[i]["transcript"]) for i in ids)
                top = ", ".join(f"{k}: {v}" for k, v in breaks.most_common(3))
                print(f"| {s} | {mode} | {w} | {wins}/{len(ids)} | {b} / {c}, p = {mcnemar_p(b, c):.2g} | {vs_best} "
                      f"| {kv:.0f} | {caches / kv:.2f}x | {top} |")


if __name__ == "__main__":
    main()
