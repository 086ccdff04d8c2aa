#!/usr/bin/env python3
"""PEFT's side of bench/lora_decode_bench: decode tokens/s for a batch of 8 sequences.

Creates (once, deterministically) eight rank-8 LoRA adapters with `peft` on the base
model loaded from the GGUF, saved under --adapters-dir/adapter_<i>, then times greedy
decode steps with transformers + PEFT for three scenarios: all base (adapters
disabled), all one adapter, eight different adapters (PEFT's mixed-batch adapter_names).
Prints one JSON object per scenario on stdout: {"scenario", "tokens_per_s", ...}.

usage: peft_decode_bench.py --model FILE --adapters-dir DIR [--steps 16] [--prompt-tokens 32] [--repeats 3]
       [--targets all-linear|qkvo] [--threads N] [--create-only]
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from transformers import AutoModelForCausalLM

NUM_ADAPTERS = 8
BATCH = 8


def targets(kind):
    qkvo = ["q_proj", "k_proj", "v_proj", "o_proj"]
    return qkvo if kind == "qkvo" else qkvo + ["gate_proj", "up_proj", "down_proj"]


def create(base, out_dir, kind):
    model = None
    for i in range(NUM_ADAPTERS):
        name = f"adapter_{i}"
        cfg = LoraConfig(r=8, lora_alpha=16, target_modules=targets(kind), bias="none")
        if model is None:
            model = get_peft_model(base, cfg, adapter_name=name)
        else:
            model.add_adapter(name, cfg)
        gen = torch.Generator().manual_seed(500 + i)
        for _, mod in model.named_modules():
            if isinstance(mod, LoraLayer) and name in mod.lora_A:
                a, b = mod.lora_A[name].weight, mod.lora_B[name].weight
                with torch.no_grad():
                    a.copy_((torch.rand(a.shape, generator=gen) * 2 - 1) / math.sqrt(a.shape[1]))
                    b.copy_(torch.randn(b.shape, generator=gen) * 0.02)
    os.makedirs(out_dir, exist_ok=True)
    for i in range(NUM_ADAPTERS):
        model.save_pretrained(out_dir, selected_adapters=[f"adapter_{i}"])
    return model


def time_decode(model, ids, steps, **kw):
    with torch.no_grad():
        out = model(ids, use_cache=True, **kw)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1)
        for _ in range(2):  # warm-up steps
            o = model(tok[:, None], past_key_values=past, use_cache=True, **kw)
            past, tok = o.past_key_values, o.logits[:, -1].argmax(-1)
        t0 = time.perf_counter()
        for _ in range(steps):
            o = model(tok[:, None], past_key_values=past, use_cache=True, **kw)
            past, tok = o.past_key_values, o.logits[:, -1].argmax(-1)
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapters-dir", required=True)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--targets", default="all-linear", choices=["all-linear", "qkvo"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--create-only", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    base = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32)
    base.eval()
    marker = os.path.join(args.adapters_dir, f"adapter_{NUM_ADAPTERS - 1}", "adapter_model.safetensors")
    if os.path.exists(marker):
        model = PeftModel.from_pretrained(base, os.path.join(args.adapters_dir, "adapter_0"), adapter_name="adapter_0")
        for i in range(1, NUM_ADAPTERS):
            model.load_adapter(os.path.join(args.adapters_dir, f"adapter_{i}"), adapter_name=f"adapter_{i}")
    else:
        model = create(base, args.adapters_dir, args.targets)
    if args.create_only:
        return 0
    model.eval()
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(100, 40000, (BATCH, args.prompt_tokens), generator=gen)
    # Scenarios interleaved, each repeated; the best run counts (the machine is shared).
    results = {"base": math.inf, "one_adapter": math.inf, "eight_adapters": math.inf}
    names = [f"adapter_{i % NUM_ADAPTERS}" for i in range(BATCH)]
    for _ in range(args.repeats):
        with model.disable_adapter():
            results["base"] = min(results["base"], time_decode(model, ids, args.steps))
        model.set_adapter("adapter_0")
        results["one_adapter"] = min(results["one_adapter"], time_decode(model, ids, args.steps))
        results["eight_adapters"] = min(results["eight_adapters"],
                                        time_decode(model, ids, args.steps, adapter_names=names))
    for scenario, seconds in results.items():
        print(json.dumps({"scenario": scenario, "seconds": seconds, "tokens_per_s": BATCH * args.steps / seconds,
                          "threads": torch.get_num_threads(), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
