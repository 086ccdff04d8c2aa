#!/usr/bin/env python3
"""Teacher-forced accuracy of the role adapters against the base model (PEFT, float32).

For each held-out trajectory and each role, the gold trajectory is fed up to the role's
last span and the argmax at every position of the role's spans is compared with the gold
token. A field counts as right when every one of its tokens is the argmax (exactly what a
greedy decode from the gold prefix would reproduce). Metrics per role:

- planner: `decision` (the first token of the thought, which commits to looking up,
  subtracting or answering), `decision_choice` (the same among those three first tokens),
  `action` (the action name after "Action:", given the gold thought), `action_choice` (which
  of the three action names' first tokens has the highest logit), `turn_exact` (the whole
  turn: thought, entity, action and <|im_end|>).
- actor: `action`, `action_choice`, `argument` (everything inside the brackets, the closing
  bracket and <|im_end|>, given the gold action), `turn_exact`. Deliberately wrong Finish
  turns (train=false) are not gold and are skipped.
- reflector (turn `Given: {finish}. Expected: {answer}.\nVerdict: right|wrong.`): `given`
  (the actor's Finish argument, copied), `expected` (the correct answer, worked out from the
  trajectory), `verdict` (the " right"/" wrong" token is the argmax, given the gold given and
  expected answers), `verdict_choice` (" right" vs " wrong", the higher logit),
  `verdict_if_right` / `verdict_if_wrong` (`verdict` on the trajectories whose gold verdict is
  that word), `turn_exact`.

The base model (adapters disabled) is scored on the same spans. An activated LoRA set (adapters
with PEFT's `alora_invocation_tokens`, such as `alora`) adapts only from the last invocation on,
so each of its spans is scored in its own forward, the trajectory cut after it. Output: a CSV with counts,
accuracies and 95% Wilson intervals.

usage: evaluate_roles.py [--sets qv_shared_a,all_linear,alora] [--no-base] [--split test] [--n 360]
                         [--roles planner,actor,reflector] [--threads 1] --out FILE
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (ADAPTER_DIR, DATA_DIR, IM_END_ID, ROLES, Segment, Tokenizer,  # noqa: E402
                    flatten, load_base_model, read_jsonl, tokenize_turns, turns_of, wilson)

from alora_forward import invocation_tokens, offsets_hooks  # noqa: E402

import torch  # noqa: E402

PAD_ID = 2


def char_ends(tok: Tokenizer, ids: list[int]) -> list[int]:
    """End character offset of each token of a turn's text (ASCII text)."""
    return [len(tok.decode(ids[:j + 1])) for j in range(len(ids))]


def token_range(ends: list[int], a: int, b: int) -> list[int]:
    """Indices of tokens whose characters overlap [a, b)."""
    out, start = [], 0
    for j, e in enumerate(ends):
        if start < b and e > a:
            out.append(j)
        start = e
    return out


def span_fields(tok: Tokenizer, seg: Segment, text: str) -> dict[str, list[int]]:
    """Token indices (within the segment, <|im_end|> last) of each scored field."""
    body = seg.ids[:-1]
    ends = char_ends(tok, body)
    last = len(seg.ids) - 1
    f: dict[str, list[int]] = {"turn_exact": list(range(len(seg.ids)))}
    if seg.role == "planner":
        t = text.index("Thought:") + len("Thought:")
        f["decision"] = token_range(ends, t, t + 1)[:1]
        f["decision_choice"] = f["decision"]
        a = text.index("Action: ") + len("Action:")
        f["action"] = token_range(ends, a, len(text))
        f["action_choice"] = f["action"][:1]
    elif seg.role == "actor":
        a = text.index("[")
        f["action"] = token_range(ends, 0, a)
        f["action_choice"] = f["action"][:1]
        f["argument"] = token_range(ends, a + 1, len(text)) + [last]
    else:
        g = text.index("Given:") + len("Given:")
        f["given"] = token_range(ends, g, text.index(". Expected:"))
        e = text.index("Expected:") + len("Expected:")
        f["expected"] = token_range(ends, e, text.index(".\nVerdict:"))
        a = text.index("Verdict:") + len("Verdict:")
        f["verdict"] = token_range(ends, a, a + 6)[:1]
        f["verdict_choice"] = f["verdict"]
        # split by the gold verdict: a reflector that always says one word scores ~50% overall
        f["verdict_if_" + text[a:].strip().rstrip(".")] = f["verdict"]
    return f


class Scorer:
    """Candidate token sets for the restricted-choice metrics."""

    def __init__(self, tok: Tokenizer) -> None:
        self.planner_actions = [tok.encode(" " + a)[0] for a in ("Lookup", "Calculate", "Finish")]
        self.actor_actions = [tok.encode(a)[0] for a in ("Lookup", "Calculate", "Finish")]
        self.verdicts = [tok.encode(" right")[0], tok.encode(" wrong")[0]]
        self.decisions = [tok.encode(" " + w)[0] for w in ("look", "subtract", "I")]

    def choice(self, role: str, metric: str) -> list[int]:
        if metric == "verdict_choice":
            return self.verdicts
        if metric == "decision_choice":
            return self.decisions
        return self.planner_actions if role == "planner" else self.actor_actions


def prepare(tok: Tokenizer, rec: dict[str, Any]) -> tuple[list[int], list[tuple[str, int, dict[str, list[int]], list[int]]]]:
    """Full ids and, per scored span, (role, start position, fields, span ids)."""
    turns = turns_of(rec)
    segs = tokenize_turns(tok, turns)
    spans = []
    pos = 0
    for s in segs:
        if s.role is not None and s.train:
            spans.append((s.role, pos, span_fields(tok, s, turns[s.turn_index].text), s.ids))
        pos += len(s.ids)
    return flatten(segs), spans


def forward_logits(lm: Any, seqs: list[list[int]], positions: list[list[int]],
                   peft_model: Any = None) -> list[torch.Tensor]:
    """Logits [len(positions[b]), V] at the given positions of each sequence (one padded batch).

    With `peft_model` whose active adapter is an aLoRA, each row is adapted from its last
    invocation on, as PEFT's forward does (right padding adds no invocation).
    """
    T = max(len(s) for s in seqs)
    x = torch.full((len(seqs), T), PAD_ID, dtype=torch.long)
    for b, s in enumerate(seqs):
        x[b, :len(s)] = torch.tensor(s)
    with torch.no_grad(), offsets_hooks(peft_model, x):
        h = lm.model(input_ids=x).last_hidden_state
        return [lm.lm_head(h[b, torch.tensor(p, dtype=torch.long)]).float() for b, p in enumerate(positions)]


def score(recs: list[tuple[list[int], list]], lm: Any, roles: tuple[str, ...], scorer: Scorer,
          batch: int, counts: dict[tuple[str, str], list[int]], peft_model: Any = None,
          per_span: bool = False) -> None:
    """Add (correct, total) per (role, metric) for the spans of `roles`.

    One forward per trajectory, or with `per_span` (aLoRA, adapted only after its last
    invocation) one per role span, the trajectory cut after that span: the span's own header
    is then the last invocation, as when the agent generates it.
    """
    work = []
    for ids, spans in recs:
        mine = [sp for sp in spans if sp[0] in roles]
        groups = [[sp] for sp in mine] if per_span else ([mine] if mine else [])
        for group in groups:
            end = max(p + len(sids) for _, p, _, sids in group)
            pos = [p + j - 1 for _, p, _, sids in group for j in range(len(sids))]
            work.append((ids[:end], pos, group))
    for b in range(0, len(work), batch):
        chunk = work[b:b + batch]
        logits = forward_logits(lm, [w[0] for w in chunk], [w[1] for w in chunk], peft_model)
        for (ids, _, mine), lg in zip(chunk, logits):
            off = 0
            for role, p, fields, sids in mine:
                span_lg = lg[off:off + len(sids)]
                off += len(sids)
                gold = torch.tensor(sids)
                hit = span_lg.argmax(-1) == gold
                for metric, idx in fields.items():
                    if metric.endswith("_choice"):
                        cand = scorer.choice(role, metric)
                        j = idx[0]
                        ok = cand[int(span_lg[j, cand].argmax())] == sids[j]
                    else:
                        ok = bool(hit[idx].all())
                    c = counts[(role, metric)]
                    c[0] += int(ok)
                    c[1] += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="qv_shared_a,all_linear",
                    help="adapter sets under --adapters; empty for the base model only")
    ap.add_argument("--adapters", type=Path, default=ADAPTER_DIR)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=360, help="first n trajectories of the split (360: all of test)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--roles", default=",".join(ROLES), help="roles to score (comma list)")
    ap.add_argument("--no-base", action="store_true", help="skip the base model")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok = Tokenizer()
    scorer = Scorer(tok)
    recs = [prepare(tok, r) for r in list(read_jsonl(args.data / f"{args.split}.jsonl"))[:args.n]]
    base = load_base_model()
    rows = []

    def emit(set_name: str, model_name: str, counts: dict[tuple[str, str], list[int]]) -> None:
        for (role, metric), (k, n) in sorted(counts.items(), key=lambda kv: (ROLES.index(kv[0][0]), kv[0][1])):
            lo, hi = wilson(k, n)
            rows.append(dict(set=set_name, role=role, metric=metric, model=model_name, n=n, correct=k,
                             accuracy=f"{k / n:.4f}", ci95_low=f"{lo:.4f}", ci95_high=f"{hi:.4f}"))
            print(f"{set_name:12s} {model_name:8s} {role:9s} {metric:15s} {k:4d}/{n:<4d} {k / n:.3f} "
                  f"[{lo:.3f}, {hi:.3f}]  ({time.time() - t0:.0f}s)", flush=True)

    if not args.no_base:
        counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        score(recs, base, tuple(r for r in ROLES if r in args.roles.split(",")), scorer, args.batch, counts)
        emit("none", "base", counts)

    from peft import PeftModel

    peft_model = None
    for set_name in [s for s in args.sets.split(",") if s]:
        for role in [r for r in ROLES if r in args.roles.split(",")]:
            name = f"{set_name}__{role}"
            path = str(args.adapters / set_name / role)
            if peft_model is None:
                peft_model = PeftModel.from_pretrained(base, path, adapter_name=name)
            else:
                peft_model.load_adapter(path, adapter_name=name)
            peft_model.set_adapter(name)
            peft_model.eval()
            counts = defaultdict(lambda: [0, 0])
            alora = invocation_tokens(peft_model, name) is not None
            score(recs, peft_model.base_model.model, (role,), scorer, args.batch, counts,
                  peft_model=peft_model, per_span=alora)
            emit(set_name, "adapter", counts)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {args.out} ({len(rows)} rows) in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
