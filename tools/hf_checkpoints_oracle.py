#!/usr/bin/env python3
"""Hugging Face checkpoint fixtures and reference logits for lorakv's HF loader.

Writes, under --out:
  tiny/<name>/            tiny random-weight models that transformers itself creates and
                          saves (config.json + safetensors): llama (llama3 RoPE scaling,
                          GQA, untied), mistral (sliding window), qwen2 (q/k/v biases,
                          tied, sharded into several files), smollm (llama, tied)
  tiny/<name>.reference.safetensors
                          ids (I64 [T]) and transformers' float32 logits (F32 [T, V]);
                          for llama also bfloat16 logits as F32 (logits_bf16)
  smollm2/                the real SmolLM2 as transformers loads it from the GGUF, saved as
                          an HF directory, with SmolLM2's original pre-tokenizer restored in
                          tokenizer.json (digits split, then byte-level; the GGUF
                          conversion writes a bare ByteLevel one)
  tokenizer_cases.json    HF `tokenizers` ids for test strings, for both tokenizer.json files

usage: hf_checkpoints_oracle.py --model GGUF --out DIR
"""
import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)


def tiny_models():
    yield "llama", LlamaForCausalLM(LlamaConfig(
        **COMMON, tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16})), 48, None
    yield "mistral", MistralForCausalLM(MistralConfig(
        **COMMON, tie_word_embeddings=False, sliding_window=8, rope_theta=10000.0)), 24, None
    yield "qwen2", Qwen2ForCausalLM(Qwen2Config(
        **COMMON, tie_word_embeddings=True, rope_theta=1000000.0, use_sliding_window=False)), 20, "60KB"
    yield "smollm", LlamaForCausalLM(LlamaConfig(
        **COMMON, tie_word_embeddings=True, rope_theta=100000.0)), 20, None


def strengthen(model: torch.nn.Module) -> None:
    """Random init gives near-uniform logits; scale weights so logits spread out and
    biases are clearly non-zero (a parity test on flat logits tests little)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
            elif "norm" not in name:
                p.mul_(4.0)


def save_reference(path: str, tensors: dict) -> None:
    save_file({k: v.contiguous() for k, v in tensors.items()}, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="SmolLM2 GGUF file")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(1234)
    os.makedirs(os.path.join(args.out, "tiny"), exist_ok=True)

    for name, model, length, shard in tiny_models():
        strengthen(model)
        model.eval()
        d = os.path.join(args.out, "tiny", name)
        shutil.rmtree(d, ignore_errors=True)
        kwargs = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(d, safe_serialization=True, **kwargs)
        ids = torch.randint(0, COMMON["vocab_size"], (length,), generator=torch.Generator().manual_seed(len(name)))
        with torch.no_grad():
            ref = {"ids": ids, "logits": model(ids[None]).logits[0].float()}
            if name == "llama":
                ref["logits_bf16"] = model.to(torch.bfloat16)(ids[None]).logits[0].float()
        save_reference(d + ".reference.safetensors", ref)
        print(f"hf_checkpoints_oracle: {name}: {length} tokens, files {sorted(os.listdir(d))}", file=sys.stderr)

    # The real SmolLM2 as an HF directory, float32, with its tokenizer.
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    d = os.path.join(args.out, "smollm2")
    shutil.rmtree(d, ignore_errors=True)
    gguf_model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32)
    # transformers refuses to save a GGUF-loaded model as such: rebuild it as a plain one.
    config = gguf_model.config.to_dict()
    config.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(gguf_model.state_dict())
    model.save_pretrained(d, safe_serialization=True)
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=model_file)
    tok.save_pretrained(d)
    tj_path = os.path.join(d, "tokenizer.json")
    bare = os.path.join(args.out, "tokenizer_bytelevel.json")
    shutil.copy(tj_path, bare)
    with open(tj_path) as f:
        tj = json.load(f)
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    with open(tj_path, "w") as f:
        json.dump(tj, f, ensure_ascii=False)

    texts = ["The capital of France is", "Hello world! 123 4567", "  leading spaces\tand\ttabs\n\nnewlines ",
             "naïve café, Ærøskøbing — 東京 🚀🚀", "def f(x):\n    return x**2  # square", "It's we'll they're I'd",
             "<|im_start|>user\nHi there<|im_end|>\n", "3.14159 + 2.71828 = 5.85987", "a\u00a0b\u2003c", "x" * 40]
    cases = []
    smol, plain = Tokenizer.from_file(tj_path), Tokenizer.from_file(bare)
    for t in texts:
        cases.append({"text": t, "smollm": smol.encode(t, add_special_tokens=False).ids,
                      "bytelevel": plain.encode(t, add_special_tokens=False).ids})
    with open(os.path.join(args.out, "tokenizer_cases.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print(f"hf_checkpoints_oracle: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
