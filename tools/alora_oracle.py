#!/usr/bin/env python3
"""Activated LoRA (aLoRA) test adapters made with PEFT, and PEFT's logits for aLoRA agents taking turns.

Loads the base model from the GGUF lorakv loads (as tools/peft_oracle.py does), creates two
aLoRA adapters with PEFT 0.21's LoraConfig(alora_invocation_tokens=...): all-linear targets,
rank 8, invocation = the role's ChatML turn header ("<|im_start|>planner\\n",
"<|im_start|>actor\\n"), each adapted projection given a 5-10% strength on real text. Saves them
as PEFT directories, converts the planner with llama.cpp's own convert_lora_to_gguf.py
(which writes adapter.alora.invocation_tokens), and records PEFT's aLoRA forward over each
agent's whole token sequence (PEFT finds the last invocation itself: calculate_alora_offsets)
for a scenario on one trajectory:
  0. the planner's turn (invocation + reply) after the system and user turns;
  1. after that turn and "\\n" are appended, the actor's turn with a private instruction (a
     system turn) before its invocation;
  2, 3. after that turn, "\\n" and a tool turn are appended, the planner and the actor each
     start a turn on the same trajectory (lorakv decodes them side by side).
Each check: the agent, its context ids, its private ids, where the adapted span begins in the
private ids, and float32 logits at every private position [len(private), vocab].
Everything lands in --out-dir: <agent>/ adapter directories, alora_planner.gguf and
alora_reference.safetensors (logits as tensors, the checks as JSON in __metadata__).

usage: alora_oracle.py --model FILE --out-dir DIR --converter-dir DIR
"""
import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # CI shares 2 cores: never spin

import torch
import llama_cpp
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from llama_cpp_converter import convert_lora
from peft_oracle import SYSTEM, capture_inputs, chat, init_adapter, write_base_config

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
AGENTS = ["planner", "actor"]
GGUF_SOURCES = ["alora_planner"]
QUESTION = "How old was Dok Gramein in 1940?"
REPLIES = {
    "planner": "Thought: I need Dok Gramein's year of birth first.<|im_end|>",
    "actor": "Lookup[Dok Gramein]<|im_end|>",
}
INSTRUCTION = "You act on the plan. Use exactly one tool call."
TOOL = "<|im_start|>tool\nDok Gramein was born in 1897 in Ghent.<|im_end|>\n"
TURN_START = ["Thought: He was born in 1897", "Calculate[1940 - 1897]"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--converter-dir", required=True, help="build folder for llama.cpp's extracted converter")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()

    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)

    def ids(text):
        return vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    invocation = {a: ids(f"<|im_start|>{a}\n") for a in AGENTS}
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    base = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32,
                                                attn_implementation="eager")
    base.eval()
    inputs = capture_inputs(base, torch.tensor([ids(chat(QUESTION))]))
    model = None
    for i, agent in enumerate(AGENTS):
        name = "alora_" + agent
        config = LoraConfig(r=8, lora_alpha=16, target_modules=ALL_LINEAR, bias="none", task_type="CAUSAL_LM",
                            alora_invocation_tokens=invocation[agent])
        if model is None:
            model = get_peft_model(base, config, adapter_name=name)
        else:
            model.add_adapter(name, config)
        init_adapter(model, name, 40 + i, inputs)
    model.eval()

    os.makedirs(args.out_dir, exist_ok=True)
    for agent in AGENTS:
        name = "alora_" + agent
        shutil.rmtree(os.path.join(args.out_dir, name), ignore_errors=True)
        model.save_pretrained(args.out_dir, selected_adapters=[name])
        with open(os.path.join(args.out_dir, name, "adapter_config.json")) as f:
            assert json.load(f)["alora_invocation_tokens"] == invocation[agent], name
    base_hf = os.path.join(args.out_dir, "base_hf")
    write_base_config(base, base_hf)
    for name in GGUF_SOURCES:
        convert_lora(args.converter_dir, base_hf, os.path.join(args.out_dir, name),
                     os.path.join(args.out_dir, name + ".gguf"))
        print(f"alora_oracle: {name}: converted by llama.cpp's convert_lora_to_gguf.py", file=sys.stderr)

    # The scenario's checks, with the trajectory as lorakv's engine holds it (a commit appends
    # the private tokens; the test appends "\n" and the tool turn).
    newline = ids("\n")
    trajectory = ids(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n")
    checks = []

    def check(agent, private, active):
        checks.append({"agent": agent, "context": list(trajectory), "private": private, "active": active})

    planner_turn = invocation["planner"] + ids(REPLIES["planner"])
    check("planner", planner_turn, 0)
    trajectory += planner_turn + newline
    instruction = ids(f"<|im_start|>system\n{INSTRUCTION}<|im_end|>\n")
    check("actor", instruction + invocation["actor"] + ids(REPLIES["actor"]), len(instruction))
    trajectory += checks[-1]["private"] + newline + ids(TOOL)
    for agent, start in zip(AGENTS, TURN_START):
        check(agent, invocation[agent] + ids(start), 0)

    tensors = {}
    with torch.no_grad():
        for i, c in enumerate(checks):
            model.set_adapter("alora_" + c["agent"])
            sequence = c["context"] + c["private"]
            logits = model(torch.tensor([sequence])).logits[0].float()
            tensors[f"check.{i}.logits"] = logits[len(c["context"]):].contiguous()
            # A control the test does not need but the reader may: PEFT adapted exactly the span.
            with model.disable_adapter():
                plain = model(torch.tensor([sequence])).logits[0].float()
            first = len(c["context"]) + c["active"]
            before = float((plain[:first] - logits[:first]).abs().max())
            after = float((plain[first:] - logits[first:]).abs().max())
            assert before <= 1e-6 and after > 1e-2, (i, before, after)
            print(f"alora_oracle: check {i} ({c['agent']}, {len(c['context'])} + {len(c['private'])} tokens): "
                  f"base before the invocation, adapted after (max change {after:.3f})", file=sys.stderr)
    meta = {"invocation": invocation, "newline": newline, "tool": ids(TOOL), "checks": checks,
            "gguf": [{"file": n + ".gguf", "source": n} for n in GGUF_SOURCES]}
    out = os.path.join(args.out_dir, "alora_reference.safetensors")
    save_file(tensors, out + ".partial", metadata={"oracle": json.dumps(meta)})
    os.replace(out + ".partial", out)
    print(f"alora_oracle: wrote {args.out_dir} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
