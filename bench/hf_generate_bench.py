#!/usr/bin/env python3
"""The transformers side of bench/generate_bench.cpp: the same metrics on the same model
(the GGUF file, dequantised by transformers to float32), prompt ids and thread count.

Metrics, tokens per second, median of --reps timed runs after --warmup untimed ones:
  prefill_<N>_tok_s   one forward over the first prompt (a fresh cache)
  decode_b1_tok_s     blocks of --decode-tokens greedy one-token steps of the first prompt
                      (one prefill, then warmup + reps consecutive blocks)
  decode_b<B>_tok_s   the same for all B prompts as one batch (equal lengths: no padding)
Decode timing excludes the prompt's forward (which yields the first token). Greedy with
use_cache, under torch.inference_mode, default attention (sdpa). Also writes
decode_b1_ids: the first prompt's greedy ids, for a same-tokens check.

usage: hf_generate_bench.py --model FILE --ids FILE --threads N --out CSV
                            [--decode-tokens 32] [--reps 5] [--warmup 1]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
import transformers
from transformers import AutoModelForCausalLM

transformers.utils.logging.disable_progress_bar()


def timed_median(fn, warmup: int, reps: int) -> float:
    seconds = []
    for r in range(warmup + reps):
        s = fn()
        if r >= warmup:
            seconds.append(s)
    return statistics.median(seconds)


def prefill_seconds(model, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    out = model(ids, use_cache=True)
    int(out.logits[0, -1].argmax())
    return time.perf_counter() - start


def decode_seconds(model, ids: torch.Tensor, steps: int, warmup: int, reps: int, tokens=None) -> float:
    """One prefill, then warmup + reps consecutive blocks of `steps` greedy steps; the
    median block's seconds. `tokens` gets the first sequence's ids (prefill + first block)."""
    out = model(ids, use_cache=True)
    state = {"past": out.past_key_values, "next": out.logits[:, -1].argmax(-1, keepdim=True)}  # next: [B, 1]
    if tokens is not None:
        tokens[:] = [int(state["next"][0, 0])]

    def block() -> float:
        start = time.perf_counter()
        for _ in range(steps):
            o = model(state["next"], past_key_values=state["past"], use_cache=True)
            state["past"] = o.past_key_values
            state["next"] = o.logits[:, -1].argmax(-1, keepdim=True)
            if tokens is not None and len(tokens) <= steps:
                tokens.append(int(state["next"][0, 0]))
        return time.perf_counter() - start

    return timed_median(block, warmup, reps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="one prompt per line, space-separated token ids")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    with open(args.ids) as f:
        prompts = [[int(t) for t in line.split()] for line in f if line.strip()]
    assert len({len(p) for p in prompts}) == 1, "prompts must have equal lengths"
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32)
    model.eval()
    print(f"hf_generate_bench: transformers loaded the GGUF in {time.time() - t0:.1f} s; torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, attention {model.config._attn_implementation}", file=sys.stderr)

    one = torch.tensor(prompts[:1], dtype=torch.long)
    batch = torch.tensor(prompts, dtype=torch.long)
    n, steps = one.shape[1], args.decode_tokens
    rows = {}
    greedy = []
    with torch.inference_mode():
        rows[f"prefill_{n}_tok_s"] = n / timed_median(lambda: prefill_seconds(model, one), args.warmup, args.reps)
        rows["decode_b1_tok_s"] = steps / decode_seconds(model, one, steps, args.warmup, args.reps, greedy)
        rows[f"decode_b{len(prompts)}_tok_s"] = len(prompts) * steps / decode_seconds(
            model, batch, steps, args.warmup, args.reps)
    with open(args.out, "w") as f:
        for k, v in rows.items():
            f.write(f"{k},{v}\n")
        f.write("decode_b1_ids," + " ".join(str(t) for t in greedy) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
