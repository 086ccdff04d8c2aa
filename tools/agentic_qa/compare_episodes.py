#!/usr/bin/env python3
"""Compares run_episodes.py's transcripts with lorakv's, turn by turn, question by question.

The Python runner's CSV (run_episodes.py --out) against the rows of one mode in `lorakv bench
episodes`' CSV (episodes_by_mode_SET.csv; its turn_margins column is needed). Per question:
  - same: every turn equal;
  - near tie: the first differing turn is one where lorakv's smallest top-1 margin (logits,
    over the turn's generated tokens) is at most --margin: float32 summation order may pick
    either token there, and the episodes may part from that turn on;
  - differs: the first differing turn has a larger margin. A failure.
Also counted: the episodes whose first turn is empty (the planner wrote only <|im_end|>) on
each side; every one must be reproduced (or be a near tie).
Exit status 0 when nothing differs, 1 otherwise.

usage: compare_episodes.py --python FILE --lorakv FILE [--mode full_shared:base] [--margin 1e-3]
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

# A transcript turn starts with "[role] "; turns are joined by " | " (agents::transcript).
TURN_START = re.compile(r" \| (?=\[(?:planner|actor|reflector|tool)\] )")


def turns(transcript: str) -> list[str]:
    """The transcript's turns, "[role] text" each."""
    return TURN_START.split(transcript)


def margins(text: str) -> list[float]:
    """turn_margins ("planner:0.41 actor:0.35 tool:-1 ...") as one margin per turn."""
    return [float(item.rsplit(":", 1)[1]) for item in text.split()]


def read_rows(path: Path, mode: str | None) -> dict[str, dict[str, str]]:
    """id -> row, of the given mode (None: every row, for the Python runner's file)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {r["id"]: r for r in rows if mode is None or r.get("mode") == mode}


def first_turn_is_empty(ts: list[str]) -> bool:
    return bool(ts) and ts[0] == "[planner] "


def compare_one(py: dict[str, str], ours: dict[str, str], margin: float) -> tuple[str, str]:
    """(verdict, detail) for one question: same, near tie or differs."""
    a, b = turns(py["transcript"]), turns(ours["transcript"])
    ours_margins = margins(ours["turn_margins"])
    if len(ours_margins) != len(b):
        raise ValueError(f"{ours['id']}: {len(b)} turns but {len(ours_margins)} margins in lorakv's row")
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    if k == len(a) and k == len(b):
        return "same", ""
    if k == len(a) or k == len(b):
        return "differs", f"turn {k}: one transcript ends ({len(a)} against {len(b)} turns)"
    py_margin = margins(py["turn_margins"])[k] if py.get("turn_margins") else float("nan")
    detail = (f"turn {k}: lorakv margin {ours_margins[k]:.3g}, PEFT margin {py_margin:.3g}\n"
              f"    PEFT:   {a[k]!r}\n    lorakv: {b[k]!r}")
    return ("near tie" if ours_margins[k] <= margin else "differs"), detail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", type=Path, required=True, help="run_episodes.py's CSV")
    ap.add_argument("--lorakv", type=Path, required=True, help="lorakv bench episodes' CSV")
    ap.add_argument("--mode", default="full_shared:base", help="the lorakv mode to compare")
    ap.add_argument("--margin", type=float, default=1e-3, help="largest margin (logits) of a near tie")
    args = ap.parse_args()

    py_rows, our_rows = read_rows(args.python, None), read_rows(args.lorakv, args.mode)
    missing = [q for q in py_rows if q not in our_rows]
    if missing:
        print(f"lorakv's file lacks {len(missing)} of the questions in mode {args.mode}: {missing[:5]}", file=sys.stderr)
        return 1
    counts = {"same": 0, "near tie": 0, "differs": 0}
    empty = {"PEFT": 0, "lorakv": 0, "both": 0}
    for q, py in py_rows.items():
        verdict, detail = compare_one(py, our_rows[q], args.margin)
        counts[verdict] += 1
        if verdict != "same":
            print(f"{q}: {verdict}, {detail}")
        ep, eo = first_turn_is_empty(turns(py["transcript"])), first_turn_is_empty(turns(our_rows[q]["transcript"]))
        empty["PEFT"] += ep
        empty["lorakv"] += eo
        empty["both"] += ep and eo
    n = len(py_rows)
    print(f"{n} questions, mode {args.mode}: {counts['same']} the same turn for turn, {counts['near tie']} part at "
          f"a near tie (lorakv margin <= {args.margin:g}), {counts['differs']} differ")
    print(f"empty first turns: PEFT {empty['PEFT']}, lorakv {empty['lorakv']}, both {empty['both']}")
    return 0 if counts["differs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
