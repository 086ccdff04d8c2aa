#!/usr/bin/env python3
"""Reference logits and greedy decodes from Hugging Face transformers.

Loads the same GGUF file lorakv loads (transformers dequantises it to float32 and
un-permutes Q/K itself), tokenizes three fixed prompts with llama.cpp's tokenizer
(vocab only: the canonical GGUF tokenizer), and writes, per prompt, the float32 logits
at every position and a 64-token greedy decode with each step's top-2 logit margin. Then
the same model in float64 gives each prompt's logits again (stored rounded to float32, a
relative change of at most 6e-8): the near-exact reference the C++ test measures float32
rounding error against, to justify its tolerance (tests/runtime/hf_parity_test.cpp).
Output is a GGUF file (lorakv's own reader loads it in the C++ parity test).

usage: hf_oracle.py --model FILE --out FILE [--new-tokens 64]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import torch
import gguf
import llama_cpp
from transformers import AutoModelForCausalLM

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

SHORT = "The capital of France is"

MEDIUM = (
    "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n"
    "Explain in three short steps how a key-value cache speeds up autoregressive decoding "
    "in a transformer, and why grouped-query attention (9 query heads, 3 KV heads) shrinks it.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def long_prompt() -> str:
    # A varied, deterministic document of well over 500 tokens: prose, numbers, code.
    parts = [
        "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n",
        "Read the following field notes and summarise them.\n\n",
    ]
    cities = ["Lisbon", "Kyoto", "Nairobi", "Reykjavik", "Montevideo", "Tbilisi", "Hanoi", "Quebec"]
    for i, city in enumerate(cities):
        parts.append(
            f"Day {i + 1}: We reached {city} at {7 + i}:{(13 * i) % 60:02d} after {120 + 37 * i} km. "
            f"The market sold {3 * i + 2} kinds of bread and the river was {0.5 + i / 4:.2f} m higher than "
            f"last year. A local engineer explained that the bridge, built in {1890 + 11 * i}, carries "
            f"{4000 + 250 * i} vehicles a day and needs repainting every {6 + i % 3} years.\n"
        )
    parts.append(
        "\nThe expedition's script for logging distances:\n"
        "def total_distance(legs):\n    return sum(leg.km for leg in legs if leg.km > 0)\n\n"
        "for leg in sorted(legs, key=lambda l: l.day):\n    print(f\"{leg.day:>3} {leg.km:8.1f}\")\n\n"
    )
    parts.append(
        "Weather summary: mostly dry, with two storms (days 3 and 6), winds up to 65 km/h, "
        "and temperatures between -2 and 31 degrees Celsius. Supplies: 14 litres of water, "
        "9 kg of rice, 3 spare tyres, 1 satellite phone. Costs so far: 2,450 euros, of which "
        "38% went to fuel and 21% to lodging.<|im_end|>\n<|im_start|>assistant\n"
    )
    return "".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()
    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    prompts = {"short": SHORT, "medium": MEDIUM, "long": long_prompt()}
    ids = {k: vocab.tokenize(v.encode("utf-8"), add_bos=False, special=True) for k, v in prompts.items()}
    assert len(ids["long"]) > 500, len(ids["long"])

    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=model_file, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    print(f"hf_oracle: transformers loaded the GGUF in {time.time() - t0:.1f} s", file=sys.stderr)

    writer = gguf.GGUFWriter(args.out + ".partial", "lorakv-oracle")
    writer.add_uint32("oracle.new_tokens", args.new_tokens)
    writer.add_array("oracle.prompts", list(prompts.keys()))
    float32_logits = {}
    with torch.no_grad():
        for name, prompt_ids in ids.items():
            x = torch.tensor([prompt_ids], dtype=torch.long)
            out = model(x, use_cache=True)
            logits = out.logits[0].float()  # [T, V]
            float32_logits[name] = logits
            writer.add_array(f"{name}.ids", [int(i) for i in prompt_ids])
            writer.add_tensor(f"{name}.logits", logits.numpy().astype(np.float32))
            # Greedy decode with the incremental cache, recording each step's margin.
            past = out.past_key_values
            step_logits = logits[-1]
            generated, margins = [], []
            for _ in range(args.new_tokens):
                top2 = torch.topk(step_logits, 2)
                token = int(top2.indices[0])
                generated.append(token)
                margins.append(float(top2.values[0] - top2.values[1]))
                o = model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                step_logits = o.logits[0, -1].float()
            writer.add_array(f"{name}.greedy_ids", generated)
            writer.add_array(f"{name}.greedy_margins", margins)
            print(f"hf_oracle: {name}: {len(prompt_ids)} prompt tokens, greedy {len(generated)} tokens, "
                  f"min margin {min(margins):.2e}", file=sys.stderr)
        model.double()
        for name, prompt_ids in ids.items():
            exact = model(torch.tensor([prompt_ids], dtype=torch.long)).logits[0]  # float64 [T, V]
            rounding = float((float32_logits[name].double() - exact).abs().max() / exact.abs().max())
            writer.add_tensor(f"{name}.logits_f64", exact.float().numpy())
            print(f"hf_oracle: {name}: float32 vs float64 logits, max |diff| / max |logit| = {rounding:.3g}",
                  file=sys.stderr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(args.out + ".partial", args.out)
    print(f"hf_oracle: wrote {args.out} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
