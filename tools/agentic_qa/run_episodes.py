#!/usr/bin/env python3
"""Free-running agentic QA episodes: planner, actor and reflector adapters take turns.

The reference for lorakv's react workflow. Each episode starts from the system and user
turns; then, per round, the planner generates after `<|im_start|>planner\\n`, the actor
after `<|im_start|>actor\\n`, and the actor's action is executed (Lookup against the
split's knowledge base, Calculate on `a - b`); its output is appended as a tool turn.
After a Finish the reflector generates its verdict and the episode ends. Decoding is
greedy; generated tokens are appended as generated (with <|im_end|> forced if the turn
hits the token limit), then "\\n". By default every agent keeps its own KV cache of the
whole trajectory (lorakv's `full` mode, exact), so it only prefills tokens it has not seen;
an activated LoRA set (`--set alora`) shares one base cache instead (see `Episode`), which is
exactly PEFT's aLoRA forward. `--mode full_shared:base` makes the standard sets share one
base cache too: the trajectory runs under PEFT's `disable_adapter()`, each turn's header and
reply with the agent's adapter on top of it; an independent reference for lorakv's
`full_shared` mode with writer `base` (compare_episodes.py compares the two).

Success: the Finish argument equals the gold answer. Also reported: whether the
reflector's verdict agrees with the episode's actual correctness, and per turn the smallest
top-1 margin (logits) over its generated tokens.

usage: run_episodes.py [--set qv_shared_a|all_linear|alora] [--mode full|full_shared:base]
                       [--split test] [--n 100] --out FILE
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (ADAPTER_DIR, DATA_DIR, IM_END_ID, ROLES, Tokenizer, Turn, header,  # noqa: E402
                    flatten, load_base_model, parse_action, read_jsonl, tokenize_turns, wilson)
from generate_data import calc  # noqa: E402

from alora_forward import adapt_last_hooks, invocation_tokens  # noqa: E402

import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

# lorakv's sharing modes this runner plays (`lorakv bench episodes --modes` names them alike).
MODES = ("full", "full_shared:base")


class Episode:
    """One trajectory's token ids and each agent's KV cache over a prefix of them.

    Standard LoRA agents keep their own exact caches (lorakv's `full` mode), unless
    `shared_base`. Activated LoRA agents (`alora`) share one cache holding the base model's K/V
    of the trajectory: PEFT's aLoRA runs everything before an agent's last invocation (its
    turn header) through the base weights, so that is exactly what each of them reads. With
    `shared_base`, standard agents share that cache too, filled under PEFT's
    `disable_adapter()`: what lorakv's `full_shared` mode with writer `base` defines (the base
    model writes every appended token, replies included once committed; an agent's header and
    reply are its own rows). Either way a turn runs the header and the reply with the adapter
    on top of the base cache, then drops those rows; the next turn processes the reply with
    the base weights as part of the trajectory.
    """

    def __init__(self, tok: Tokenizer, question: str, system: str, alora: bool = False,
                 shared_base: bool = False) -> None:
        self.tok = tok
        self.ids = flatten(tokenize_turns(tok, [Turn("system", system), Turn("user", question)]))
        self.alora = alora
        self.shared_base = shared_base or alora
        self.caches: dict[str, DynamicCache] = {r: DynamicCache() for r in ROLES}
        self.base_cache = DynamicCache()
        self.nl = tok.encode("\n")
        self.log: list[str] = []
        self.turn_margins: list[tuple[str, float]] = []  # per transcript turn; tools -1

    def generate(self, model: Any, adapter: str, role: str, max_new: int) -> str:
        """Append the role's header, decode greedily until <|im_end|>, append the turn; its text."""
        model.set_adapter(adapter)
        lm = model.base_model.model
        hdr = self.tok.encode(header(role))
        with torch.no_grad():
            if self.shared_base:
                gen, margins = self._generate_on_base_cache(model, lm, hdr, max_new)
            else:
                self.ids += hdr
                gen, margins = self._decode(lm, self.caches[role], self.ids[self.caches[role].get_seq_length():], max_new)
        if gen[-1] != IM_END_ID:
            gen.append(IM_END_ID)
        self.ids += gen + self.nl
        text = self.tok.decode(gen[:-1])
        self.log.append(f"[{role}] {text}")
        self.turn_margins.append((role, min(margins)))
        return text

    def _generate_on_base_cache(self, model: Any, lm: Any, hdr: list[int], max_new: int) -> tuple[list[int], list[float]]:
        """The trajectory through the base weights, then header and reply with the adapter."""
        cache = self.base_cache
        context = self.ids[cache.get_seq_length():]
        if context:
            # aLoRA without offsets runs the base weights only; a standard adapter is switched off.
            with nullcontext() if self.alora else model.disable_adapter():
                lm(input_ids=torch.tensor([context]), past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.ids += hdr
        gen, margins = self._decode(lm, cache, hdr, max_new, model if self.alora else None)
        cache.crop(-(len(hdr) + len(gen) - 1))  # the adapter's rows: header and fed reply tokens
        return gen, margins

    @staticmethod
    def _decode(lm: Any, cache: DynamicCache, new: list[int], max_new: int,
                alora_model: Any = None) -> tuple[list[int], list[float]]:
        """Feed `new`, then greedy tokens until <|im_end|> or max_new; the generated ids and
        each one's top-1 margin (logits).

        With `alora_model`, every fed token is adapted (they all follow the invocation)."""
        margins: list[float] = []

        def step(ids: list[int]) -> int:
            with adapt_last_hooks(alora_model, 1, len(ids)):
                out = lm(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
            top2 = torch.topk(out.logits[0, -1].float(), 2)
            margins.append(float(top2.values[0] - top2.values[1]))
            return int(top2.indices[0])

        gen = [step(new)]
        while gen[-1] != IM_END_ID and len(gen) < max_new:
            gen.append(step([gen[-1]]))
        return gen, margins

    def tool(self, text: str) -> None:
        """Append a tool turn."""
        self.ids += self.tok.encode(header("tool") + text) + [IM_END_ID] + self.nl
        self.log.append(f"[tool] {text}")
        self.turn_margins.append(("tool", -1.0))


def run_one(model: Any, set_name: str, tok: Tokenizer, rec: dict[str, Any], kb: dict[str, str],
            max_rounds: int, max_new: int, alora: bool = False, shared_base: bool = False) -> dict[str, Any]:
    """Play one episode; a row for the CSV."""
    system = rec["turns"][0]["text"]
    ep = Episode(tok, rec["question"], system, alora, shared_base)
    name = lambda r: f"{set_name}__{r}"  # noqa: E731
    answer, verdict, rounds, consistent = None, None, 0, True
    for rounds in range(1, max_rounds + 1):
        plan = ep.generate(model, name("planner"), "planner", max_new)
        act_text = ep.generate(model, name("actor"), "actor", max_new)
        act = parse_action(act_text)
        planned = plan.rsplit("Action:", 1)[-1].strip() if "Action:" in plan else ""
        if act is None:
            consistent = False
            ep.tool("Error: unknown action.")
            continue
        consistent &= planned == act[0]
        if act[0] == "Lookup":
            ep.tool(kb.get(act[1].strip(), "No document found."))
        elif act[0] == "Calculate":
            ep.tool(calc(act[1]))
        else:
            answer = act[1].strip()
            ref = ep.generate(model, name("reflector"), "reflector", max_new)
            v = ref.split("Verdict:", 1)[-1].strip().rstrip(".") if "Verdict:" in ref else ref
            verdict = v if v in ("right", "wrong") else f"other:{v[:20]}"
            break
    success = answer is not None and answer == rec["answer"]
    return dict(id=rec["id"], kind=rec["kind"], question=rec["question"], gold=rec["answer"],
                answer="" if answer is None else answer, success=int(success), finished=int(answer is not None),
                rounds=rounds, verdict=verdict or "", verdict_agrees=int(verdict == ("right" if success else "wrong")),
                planner_actor_consistent=int(consistent), tokens=len(ep.ids), transcript=" | ".join(ep.log),
                turn_margins=" ".join(f"{r}:{m:.6g}" for r, m in ep.turn_margins))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="qv_shared_a", help="adapter set under --adapters")
    ap.add_argument("--adapters", type=Path, default=ADAPTER_DIR)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--mode", default="full", choices=MODES,
                    help="full: a cache per agent; full_shared:base: one cache the base model fills "
                         "(an aLoRA set always shares one)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--n", type=int, default=100, help="first n questions of the split")
    ap.add_argument("--max-rounds", type=int, default=6, help="planner+actor rounds per episode")
    ap.add_argument("--max-new", type=int, default=40, help="token limit per agent turn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok = Tokenizer()
    kb = {r["name"]: r["document"] for r in read_jsonl(args.data / f"kb_{args.split}.jsonl")}
    recs = list(read_jsonl(args.data / f"{args.split}.jsonl"))[:args.n]

    from peft import PeftModel

    model = None
    for role in ROLES:
        path = str(args.adapters / args.set / role)
        if model is None:
            model = PeftModel.from_pretrained(load_base_model(), path, adapter_name=f"{args.set}__{role}")
        else:
            model.load_adapter(path, adapter_name=f"{args.set}__{role}")
    model.eval()
    kinds = {invocation_tokens(model, f"{args.set}__{r}") is not None for r in ROLES}
    if len(kinds) != 1:
        ap.error(f"set {args.set!r} mixes activated and standard LoRA adapters")
    alora = kinds.pop()

    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as f:  # a row per episode as it ends
        w = None
        for i, rec in enumerate(recs):
            row = run_one(model, args.set, tok, rec, kb, args.max_rounds, args.max_new, alora,
                          args.mode == "full_shared:base")
            rows.append(dict(set=args.set, mode=args.mode, **row))
            if w is None:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
            w.writerow(rows[-1])
            f.flush()
            k = sum(r["success"] for r in rows)
            print(f"{i + 1}/{len(recs)} success {row['success']} ({k}/{i + 1}) answer={row['answer']!r} "
                  f"gold={row['gold']!r} verdict={row['verdict']} ({time.time() - t0:.0f}s)", flush=True)
    for key in ("success", "finished", "verdict_agrees", "planner_actor_consistent"):
        # verdict agreement is over finished episodes only (no Finish, no verdict)
        sel = [r for r in rows if r["finished"] or key != "verdict_agrees"]
        n, k = len(sel), sum(r[key] for r in sel)
        lo, hi = wilson(k, n)
        print(f"{args.set} {key}: {k}/{n} = {k / max(1, n):.3f} [{lo:.3f}, {hi:.3f}]")
    print(f"wrote {args.out} in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
