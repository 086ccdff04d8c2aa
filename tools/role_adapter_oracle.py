#!/usr/bin/env python3
"""PEFT's reference outputs for the committed role adapters on held-out agentic QA trajectories.

For each adapter under assets/role_adapters/{qv_shared_a,all_linear}/{planner,actor,reflector}
and each chosen test trajectory (one whose Finish is right, one deliberately wrong):
  - the trajectory's token ids, cut after the role's last turn (the layout of
    tools/agentic_qa/README.md, tokenized turn by turn as a session builds it);
  - PEFT's float32 logits at the positions that predict that last turn's tokens;
  - a greedy decode of that turn from the gold prefix (up to and including the turn's
    header), until <|im_end|> or 40 tokens, with each step's top-2 margin.
The rendered trajectory text goes along, so the C++ side can check its own tokenizer
reproduces the ids. Output: DIR/role_reference.safetensors (logits as tensors; ids, margins,
adapter paths and texts as JSON in __metadata__).

usage: role_adapter_oracle.py --model FILE --out-dir DIR [--trajectories test-00000,...]
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # CI shares 2 cores: never spin

sys.path.insert(0, str(Path(__file__).resolve().parent / "agentic_qa"))
from common import (ADAPTER_DIR, DATA_DIR, IM_END_ID, ROLES, Tokenizer, header,  # noqa: E402
                    read_jsonl, render, tokenize_turns, turns_of)

import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

SETS = ("qv_shared_a", "all_linear")
MAX_NEW = 40


def pick_trajectories(recs):
    """The first test trajectory with a right Finish and the first with a wrong one."""
    right = next(r for r in recs if r["finish_correct"])
    wrong = next(r for r in recs if not r["finish_correct"])
    return [right, wrong]


def last_turn(tok, rec, role):
    """(ids cut after the role's last turn, index where that turn's content starts, its length)."""
    ids, start, length = [], -1, 0
    for seg in tokenize_turns(tok, turns_of(rec)):
        if seg.role == role and seg.train:
            start, length = len(ids), len(seg.ids)
        ids.extend(seg.ids)
    assert start > 0, f"{rec['id']} has no trained {role} turn"
    return ids[:start + length], start, length


def greedy(lm, prefix):
    """Greedy decode after `prefix` until <|im_end|> or MAX_NEW tokens: (ids, top-2 margins)."""
    out = lm(torch.tensor([prefix]), use_cache=True)
    past, step = out.past_key_values, out.logits[0, -1].float()
    ids, margins = [], []
    for _ in range(MAX_NEW):
        top2 = torch.topk(step, 2)
        nxt = int(top2.indices[0])
        ids.append(nxt)
        margins.append(float(top2.values[0] - top2.values[1]))
        if nxt == IM_END_ID:
            break
        o = lm(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past, step = o.past_key_values, o.logits[0, -1].float()
    return ids, margins


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--adapters", type=Path, default=ADAPTER_DIR)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()

    tok = Tokenizer(Path(args.model))
    trajectories = pick_trajectories(list(read_jsonl(args.data / "test.jsonl")))
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    base = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32,
                                                attn_implementation="eager")
    base.eval()

    tensors, entries = {}, []
    model = None
    with torch.no_grad():
        for set_name in SETS:
            for role in ROLES:
                name = f"{set_name}/{role}"
                path = args.adapters / set_name / role
                if model is None:
                    model = PeftModel.from_pretrained(base, str(path), adapter_name=name)
                else:
                    model.load_adapter(str(path), adapter_name=name)
                model.set_adapter(name)
                model.eval()
                lm = model.base_model.model
                for t, rec in enumerate(trajectories):
                    ids, start, length = last_turn(tok, rec, role)
                    key = f"{set_name}.{role}.{t}"
                    logits = lm(torch.tensor([ids])).logits[0].float()
                    tensors[key] = logits[start - 1:start - 1 + length].contiguous()
                    gen, margins = greedy(lm, ids[:start])
                    entries.append(dict(key=key, set=set_name, role=role, adapter=str(path.resolve()),
                                        trajectory=rec["id"], ids=ids, turn_start=start, turn_length=length,
                                        greedy_ids=gen, greedy_margins=margins))
                    print(f"role_adapter_oracle: {key} {rec['id']}: greedy {tok.decode(gen)!r} "
                          f"(gold {tok.decode(ids[start:])!r}), min margin {min(margins):.2e}", file=sys.stderr)
    meta = dict(entries=entries, texts={r["id"]: render(turns_of(r)) for r in trajectories},
                headers={r: header(r) for r in ROLES})
    os.makedirs(args.out_dir, exist_ok=True)
    out = os.path.join(args.out_dir, "role_reference.safetensors")
    save_file(tensors, out + ".partial", metadata={"oracle": json.dumps(meta)})
    os.replace(out + ".partial", out)
    print(f"role_adapter_oracle: wrote {out} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
