#!/usr/bin/env python3
"""PEFT's logits for lorakv's `full_shared` mode with writer `base`, at the planner's first step.

In that mode the base model writes every context row and an agent's turn header runs with its
adapter on top of them. PEFT computes the same independently: the context's forward under
`disable_adapter()` fills a cache, then the planner's header `<|im_start|>planner\\n` runs with
the planner adapter over it; the header's last row gives the logits of the turn's first token.

Prompts: for each committed standard adapter set (qv_shared_a, all_linear), two held-out test
trajectories (the first whose Finish is right, the first whose Finish is wrong), cut before
their first and before their last planner turn: four prompts per set, the gold turns tokenized
turn by turn (tools/agentic_qa/README.md). Output: DIR/shared_base_reference.safetensors with
the logits (float32 [vocab] per prompt, named "<set>.<index>") and, as JSON in __metadata__,
each prompt's context ids, header ids and the planner adapter's path.

usage: shared_base_oracle.py --model FILE --out-dir DIR
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
from common import ADAPTER_DIR, DATA_DIR, Tokenizer, header, read_jsonl, tokenize_turns, turns_of  # noqa: E402

import torch  # noqa: E402
from peft import PeftModel  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

SETS = ("qv_shared_a", "all_linear")


def planner_prompts(tok, rec):
    """The trajectory's ids before its first and before its last planner turn."""
    ids, starts = [], []
    for seg in tokenize_turns(tok, turns_of(rec)):
        if seg.role == "planner":
            starts.append(len(ids))
        ids.extend(seg.ids)
    assert starts, f"{rec['id']} has no planner turn"
    return [ids[:starts[0]], ids[:starts[-1]]]


def first_step_logits(model, adapter, context, hdr):
    """float32 [vocab]: the context through the base weights, the header with the adapter."""
    lm = model.base_model.model
    with model.disable_adapter():
        past = lm(torch.tensor([context]), use_cache=True).past_key_values
    model.set_adapter(adapter)
    return lm(torch.tensor([hdr]), past_key_values=past, use_cache=True).logits[0, -1].float()


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
    recs = list(read_jsonl(args.data / "test.jsonl"))
    trajectories = [next(r for r in recs if r["finish_correct"]), next(r for r in recs if not r["finish_correct"])]
    prompts = [(rec["id"], ids) for rec in trajectories for ids in planner_prompts(tok, rec)]
    hdr = tok.encode(header("planner"))
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    base = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32,
                                                attn_implementation="eager")
    base.eval()

    tensors, entries, model = {}, [], None
    with torch.no_grad():
        for set_name in SETS:
            path = args.adapters / set_name / "planner"
            if model is None:
                model = PeftModel.from_pretrained(base, str(path), adapter_name=set_name)
            else:
                model.load_adapter(str(path), adapter_name=set_name)
            model.eval()
            for i, (trajectory, context) in enumerate(prompts):
                key = f"{set_name}.{i}"
                tensors[key] = first_step_logits(model, set_name, context, hdr).contiguous()
                entries.append(dict(key=key, set=set_name, adapter=str(path.resolve()), trajectory=trajectory,
                                    context=context, header=hdr))
                print(f"shared_base_oracle: {key} {trajectory} ({len(context)} context tokens): first token "
                      f"{tok.decode([int(tensors[key].argmax())])!r}", file=sys.stderr)
    os.makedirs(args.out_dir, exist_ok=True)
    out = os.path.join(args.out_dir, "shared_base_reference.safetensors")
    save_file(tensors, out + ".partial", metadata={"oracle": json.dumps(dict(entries=entries))})
    os.replace(out + ".partial", out)
    print(f"shared_base_oracle: wrote {out} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
