#!/usr/bin/env python3
"""Deterministic LoRA test adapters made with PEFT itself, and PEFT's reference outputs.

Loads the base model from the same GGUF lorakv loads (transformers dequantises it and
un-permutes Q/K), creates LoRA adapters with `peft` on it (targets {q,v}, {q,k,v,o},
all-linear; ranks 1, 8, 64; rsLoRA; rank/alpha patterns; a regex target; a layer subset;
three adapters sharing v_proj's A; three sharing the A of every adapted module), gives
each adapted projection a realistic strength (its output changes by 5-10% in norm on
real text), saves them as PEFT directories, converts two of them to GGUF LoRA files with
llama.cpp's own convert_lora_to_gguf.py (tools/llama_cpp_converter.py; its --base is the
base model's config.json as transformers reads it from the GGUF), and records with `PeftModel`:
  - per adapter: float32 logits at every prompt position and a 32-token greedy decode
    with each step's top-2 margin;
  - a mixed batch (four sequences of equal length: three adapters and one without), run as
    one batch with PEFT's adapter_names;
  - a ragged set (prompts of different lengths, each with its own adapter or none, one
    adapter on two of them), each prompt run through PEFT alone (no batch, no padding).
Everything lands in --out-dir: <name>/ adapter directories, base_hf/config.json,
<adapter>.gguf and peft_reference.safetensors (logits as tensors, ids/margins as JSON in
__metadata__).

usage: peft_oracle.py --model FILE --out-dir DIR --converter-dir DIR [--new-tokens 32]
"""
import argparse
import json
import math
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
from peft.tuners.lora import LoraLayer
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from llama_cpp_converter import convert_lora

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat(text):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
            "<|im_start|>assistant\n")


PROMPTS = [
    "Explain how a key-value cache speeds up decoding in a transformer.",
    "Write a short plan for a three-day trip to Kyoto in spring, with a budget.",
    "List three differences between a linked list and an array, briefly.",
    "Summarise why low-rank adapters let many agents share one base model.",
]
QKVO = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL = QKVO + ["gate_proj", "up_proj", "down_proj"]

# name -> LoraConfig arguments. Order matters only for seeds.
SPECS = {
    "qv_r8": dict(target_modules=["q_proj", "v_proj"], r=8, lora_alpha=16),
    "qkvo_r1": dict(target_modules=QKVO, r=1, lora_alpha=2, exclude_modules=["model.layers.0.self_attn.o_proj"]),
    "all_linear_r64": dict(target_modules="all-linear", r=64, lora_alpha=32),
    "rslora_r8": dict(target_modules=QKVO, r=8, lora_alpha=8, use_rslora=True),
    "pattern_r8": dict(target_modules="all-linear", r=8, lora_alpha=16,
                       rank_pattern={"q_proj": 4, "layers.5.mlp.down_proj": 16}, alpha_pattern={"v_proj": 32}),
    "regex_qk": dict(target_modules=r".*\.layers\.\d+\.self_attn\.(q_proj|k_proj)", r=8, lora_alpha=16),
    "layer_subset": dict(target_modules=["k_proj", "up_proj"], r=8, lora_alpha=16,
                         layers_to_transform=[0, 1, 2, 10, 29], layers_pattern="layers"),
    "role_v_0": dict(target_modules=["q_proj", "v_proj"], r=8, lora_alpha=16),
    "role_v_1": dict(target_modules=["q_proj", "v_proj"], r=8, lora_alpha=16),
    "role_v_2": dict(target_modules=["q_proj", "v_proj"], r=8, lora_alpha=16),
    "role_all_0": dict(target_modules=QKVO, r=8, lora_alpha=16),
    "role_all_1": dict(target_modules=QKVO, r=8, lora_alpha=16),
    "role_all_2": dict(target_modules=QKVO, r=8, lora_alpha=16),
}
# Adapters that take their A from the first of the group: (module names or None for all).
SHARED_A = {"role_v_1": ("role_v_0", ["v_proj"]), "role_v_2": ("role_v_0", ["v_proj"]),
            "role_all_1": ("role_all_0", None), "role_all_2": ("role_all_0", None)}
MIXED = ["role_v_1", "pattern_r8", None, "qkvo_r1"]  # one sequence per prompt; None: the base model
# Converted to GGUF LoRA by llama.cpp: q/k/v/o (Q/K permuted) and every linear module at rank 64.
GGUF_SOURCES = ["role_all_0", "all_linear_r64"]
# (adapter or None, prompt text): all lengths differ, from one token up; role_v_1 twice, apart.
RAGGED = [("role_v_1", chat(PROMPTS[1])), (None, "The capital of France is"),
          ("pattern_r8", chat(PROMPTS[0] + " Then compare it with recomputing every step, in numbers.")),
          ("qv_r8", "<|im_start|>"), ("role_v_1", chat(PROMPTS[2])), ("all_linear_r64", chat(" ".join(PROMPTS))),
          ("qkvo_r1", chat(PROMPTS[3]))]


def capture_inputs(model, ids):
    """Input activations of every Linear in the decoder layers, on the base model."""
    inputs, hooks = {}, []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and ".layers." in name:
            hooks.append(mod.register_forward_hook(
                lambda m, args, out, name=name: inputs.__setitem__(name, args[0].detach()[0].clone())))
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    return inputs


def init_adapter(model, name, index, inputs):
    """Deterministic A (kaiming-uniform like PEFT's) and a B scaled to a 5-10% change."""
    gen = torch.Generator().manual_seed(1000 + index)
    source, shared = SHARED_A.get(name, (None, None))
    for path, mod in model.named_modules():
        if not isinstance(mod, LoraLayer) or name not in mod.lora_A:
            continue
        a, b = mod.lora_A[name].weight, mod.lora_B[name].weight
        key = path.replace("base_model.model.", "")
        module = key.rsplit(".", 1)[1]
        with torch.no_grad():
            if source is not None and (shared is None or module in shared):
                a.copy_(mod.lora_A[source].weight)
            else:
                bound = 1.0 / math.sqrt(a.shape[1])
                a.copy_((torch.rand(a.shape, generator=gen) * 2 - 1) * bound)
            b.copy_(torch.randn(b.shape, generator=gen))
            x = inputs[key]
            base = x @ mod.base_layer.weight.T
            delta = (x @ a.T) @ b.T * mod.scaling[name]
            target = 0.05 + 0.05 * float(torch.rand((), generator=gen))
            b.mul_(target * base.norm() / delta.norm())


def greedy(model, ids, new_tokens, adapter_names=None):
    """Logits at every prompt position [B, T, V] and a greedy decode per row with margins."""
    kw = {} if adapter_names is None else {"adapter_names": adapter_names}
    out = model(ids, use_cache=True, **kw)
    logits = out.logits.float()
    past, step = out.past_key_values, logits[:, -1]
    tokens, margins = [], []
    for _ in range(new_tokens):
        top2 = torch.topk(step, 2, dim=-1)
        tok = top2.indices[:, 0]
        tokens.append(tok.tolist())
        margins.append((top2.values[:, 0] - top2.values[:, 1]).tolist())
        o = model(tok[:, None], past_key_values=past, use_cache=True, **kw)
        past, step = o.past_key_values, o.logits[:, -1].float()
    return logits, [list(t) for t in zip(*tokens)], [list(m) for m in zip(*margins)]


def run_alone(model, adapter, ids, new_tokens):
    """One prompt [1, T] through PEFT with only `adapter` active (None: adapters disabled)."""
    if adapter is None:
        with model.disable_adapter():
            return greedy(model, ids, new_tokens)
    model.set_adapter(adapter)
    return greedy(model, ids, new_tokens)


def write_base_config(base, path):
    """The base model's config.json as transformers read it from the GGUF, for the converter's --base."""
    config = base.config.to_dict()
    config.pop("quantization_config", None)  # the GGUF's, not an HF checkpoint's
    config["architectures"] = [type(base).__name__]  # the converter picks its model class by this
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--converter-dir", required=True, help="build folder for llama.cpp's extracted converter")
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()

    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    prompt_ids = [vocab.tokenize(chat(p).encode("utf-8"), add_bos=False, special=True) for p in PROMPTS]
    mixed_len = min(len(p) for p in prompt_ids)
    ragged_ids = [vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True) for _, text in RAGGED]
    lengths = [len(ids) for ids in ragged_ids]
    assert len(set(lengths)) == len(lengths) and min(lengths) == 1, lengths
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    base = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32,
                                                attn_implementation="eager")
    base.eval()
    ids0 = torch.tensor([prompt_ids[0]])
    inputs = capture_inputs(base, ids0)

    names = list(SPECS)
    model = None
    for i, name in enumerate(names):
        config = LoraConfig(bias="none", **SPECS[name])
        if model is None:
            model = get_peft_model(base, config, adapter_name=name)
        else:
            model.add_adapter(name, config)
        init_adapter(model, name, i, inputs)
    model.eval()
    print(f"peft_oracle: {len(names)} adapters created in {time.time() - t0:.1f} s", file=sys.stderr)

    os.makedirs(args.out_dir, exist_ok=True)
    for name in names:
        shutil.rmtree(os.path.join(args.out_dir, name), ignore_errors=True)
        model.save_pretrained(args.out_dir, selected_adapters=[name])
        assert os.path.exists(os.path.join(args.out_dir, name, "adapter_model.safetensors")), name
    base_hf = os.path.join(args.out_dir, "base_hf")
    write_base_config(base, base_hf)
    for name in GGUF_SOURCES:
        convert_lora(args.converter_dir, base_hf, os.path.join(args.out_dir, name),
                     os.path.join(args.out_dir, name + ".gguf"))
        print(f"peft_oracle: {name}: converted by llama.cpp's convert_lora_to_gguf.py", file=sys.stderr)

    tensors, meta = {}, {"prompt": prompt_ids[0], "new_tokens": args.new_tokens, "adapters": {}, "mixed": [],
                         "ragged": [], "gguf": [{"file": n + ".gguf", "source": n} for n in GGUF_SOURCES]}
    with torch.no_grad():
        # Every adapter (and the base) on the same prompt, as one PEFT mixed batch: PEFT
        # runs each row with its own adapter, so each row is that adapter alone (and the
        # 2-core CI runs 33 forwards instead of 33 per adapter).
        rows = names + ["__base__"]
        logits, toks, margins = greedy(model, ids0.repeat(len(rows), 1), args.new_tokens, adapter_names=rows)
        for i, name in enumerate(names):
            tensors[f"{name}.logits"] = logits[i].contiguous()
            meta["adapters"][name] = {"greedy_ids": toks[i], "greedy_margins": margins[i]}
            print(f"peft_oracle: {name}: greedy {toks[i][:8]}..., min margin {min(margins[i]):.2e}", file=sys.stderr)
        meta["base_greedy_ids"] = toks[-1]
        tensors["base.logits"] = logits[-1].contiguous()
        # A cross-check of the mixed-batch path against PEFT's plain single-adapter path.
        model.set_adapter(names[0])
        single = model(ids0).logits[0].float()
        err = float((single - logits[0]).abs().max() / single.abs().max())
        print(f"peft_oracle: mixed-batch row vs set_adapter for {names[0]}: relative difference {err:.2e}", file=sys.stderr)
        assert err < 1e-5, err
        batch = torch.tensor([p[:mixed_len] for p in prompt_ids])
        logits, toks, margins = greedy(model, batch, args.new_tokens,
                                       adapter_names=[n if n else "__base__" for n in MIXED])
        for i, name in enumerate(MIXED):
            tensors[f"mixed.{i}.logits"] = logits[i].contiguous()
            meta["mixed"].append({"adapter": name, "prompt": prompt_ids[i][:mixed_len], "greedy_ids": toks[i],
                                  "greedy_margins": margins[i]})
        for i, (name, ids) in enumerate(zip((a for a, _ in RAGGED), ragged_ids)):
            logits, toks, margins = run_alone(model, name, torch.tensor([ids]), args.new_tokens)
            tensors[f"ragged.{i}.logits"] = logits[0].contiguous()
            meta["ragged"].append({"adapter": name, "prompt": ids, "greedy_ids": toks[0], "greedy_margins": margins[0]})
            print(f"peft_oracle: ragged {i} ({name}, {len(ids)} tokens): min margin {min(margins[0]):.2e}",
                  file=sys.stderr)
    out = os.path.join(args.out_dir, "peft_reference.safetensors")
    save_file(tensors, out + ".partial", metadata={"oracle": json.dumps(meta)})
    os.replace(out + ".partial", out)
    print(f"peft_oracle: wrote {args.out_dir} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
