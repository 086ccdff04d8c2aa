#!/usr/bin/env python3
"""Print `lorakv generate` arguments that put the three role adapters to work on one
held-out trajectory: the planner's, the actor's and the reflector's last turns, each
prompted with the gold trajectory up to that turn's header (tools/agentic_qa/README.md's
layout), as one batch of three prompts, each with its own adapter.

usage: demo_prompts.py [--set qv_shared_a] [--id test-00001]   (prints NUL-separated arguments)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ADAPTER_DIR, DATA_DIR, REPO, ROLES, header, read_jsonl, render, turns_of  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="qv_shared_a")
    ap.add_argument("--id", default="test-00001", help="a trajectory of the test split")
    args = ap.parse_args()
    rec = next((r for r in read_jsonl(DATA_DIR / "test.jsonl") if r["id"] == args.id), None)
    if rec is None:
        print(f"demo_prompts.py: no trajectory {args.id!r} in {DATA_DIR / 'test.jsonl'}", file=sys.stderr)
        return 2
    turns = turns_of(rec)
    finish = [t.text for t in turns if t.role == "actor"][-1]
    print(f"trajectory {rec['id']}: {rec['question']} (answer: {rec['answer']}); the reflector judges the "
          f"trajectory's {finish}, which is {'right' if rec['finish_correct'] else 'deliberately wrong'}",
          file=sys.stderr)
    out: list[str] = []
    for role in ROLES:
        last = max(i for i, t in enumerate(turns) if t.role == role)
        path = (ADAPTER_DIR / args.set / role).relative_to(REPO)
        out += ["--adapter", f"{role}={path}", "--prompt", render(turns[:last]) + header(role), "--use", role]
    sys.stdout.write("\0".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
