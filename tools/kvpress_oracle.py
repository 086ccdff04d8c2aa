#!/usr/bin/env python3
"""Which tokens kvpress keeps: the reference for lorakv's streaming_llm and h2o policies.

kvpress (NVIDIA's KV-cache compression library) compresses once, inside one prefill
forward: after each attention layer its press scores the layer's keys per KV head and keeps
the top int(n * (1 - compression_ratio)) of them (ScorerPress.compress). This runs, on the
same GGUF model lorakv loads (transformers dequantises it to float32; eager attention,
which ObservedAttentionPress needs), one prefill of a fixed English text per press:
  - StreamingLLMPress(n_sink=4): the 4 sinks and the newest rows;
  - ObservedAttentionPress: each key's attention probability summed over the queries that
    see it, divided by how many do (n - j for key j), then averaged over the query heads
    of its KV head;
hooked into the model by kvpress, with the press of each compression ratio (0.5, 0.75)
compressing the same layer inputs. It writes, per press, ratio, layer and KV head, the kept
positions as kvpress's own output shows them (each kept key row found among the layer's
keys, so no kvpress logic is redone here), and ObservedAttentionPress's scores per layer
and KV head. tests/cli/kvpress_parity_test.cpp runs the same tokens through lorakv.

kvpress pins transformers < 5.3 while the test environment has a newer one: run this with
PYTHONPATH naming the kvpress environment (tools/setup_python.sh kvpress), which holds
kvpress, its transformers and their pure-Python dependencies, and reuses the test
environment's torch.

usage: kvpress_oracle.py --model FILE --text FILE --out FILE.json
"""
import argparse
import json
import os
import sys
import time
from importlib.metadata import version

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
import llama_cpp

try:
    import kvpress
    import transformers
    from kvpress import ObservedAttentionPress, StreamingLLMPress
    from transformers import AutoModelForCausalLM, DynamicCache
except ImportError as e:
    sys.exit(f"kvpress_oracle.py: {e}; set up the kvpress environment (tools/setup_python.sh kvpress) "
             "and put it first on PYTHONPATH")

RATIOS = (0.5, 0.75)
N_SINK = 4


def kept_rows(keys: torch.Tensor, kept: torch.Tensor) -> list:
    """Per KV head, the ascending indices of `keys` [1, H, n, d] whose rows `kept` [1, H, m, d] holds.

    The press gathers whole rows, so each kept row is bit for bit one row of the input, and
    rotary positions make every row of a head distinct (asserted)."""
    out = []
    for h in range(keys.shape[1]):
        index = {row.tobytes(): j for j, row in enumerate(keys[0, h].numpy())}
        assert len(index) == keys.shape[2], "two key rows of one head are equal"
        out.append(sorted(index[row.tobytes()] for row in kept[0, h].numpy()))
    return out


def run_presses(model, ids: torch.Tensor, presses: list, scores_out=None) -> list:
    """One prefill with presses[0] hooked into the model by kvpress's own context manager. At
    each layer every press compresses the same keys, values and attention weights (the hook's
    arguments; a press only reads them), so one forward serves every ratio. Returns, per press,
    kept[layer][kv_head] = positions; with scores_out (a dict), also records presses[0]'s own
    scores per layer: [kv_heads][n] floats."""
    kept = [{} for _ in presses]
    compress = [press.compress for press in presses]  # bound before the hooked one is replaced

    def recording_compress(module, hidden_states, keys, values, attentions, kwargs):
        outputs = [fn(module, hidden_states, keys, values, attentions, kwargs) for fn in compress]
        for i, (new_keys, _) in enumerate(outputs):
            kept[i][module.layer_idx] = kept_rows(keys, new_keys)
        if scores_out is not None:
            s = presses[0].score(module, hidden_states, keys, values, attentions, kwargs)  # [1, H, n]
            scores_out[module.layer_idx] = s[0].double().tolist()
        return outputs[0]

    hooked = presses[0]
    hooked.compress = recording_compress  # the hook calls self.compress: the instance's wins
    with torch.no_grad(), hooked(model):
        model(ids, past_key_values=DynamicCache(), use_cache=True)
    layers = model.config.num_hidden_layers
    for k in kept:
        assert sorted(k) == list(range(layers)), sorted(k)
    return [[k[layer] for layer in range(layers)] for k in kept]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.time()
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    # llama.cpp's tokenizer (vocab only), as `lorakv perplexity` tokenizes: special-token
    # text as plain text, no BOS (the model's tokenizer does not ask for one).
    vocab = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    ids = vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    transformers.utils.logging.disable_progress_bar()
    model_dir, model_file = os.path.split(os.path.abspath(args.model))
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, gguf_file=model_file, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    c = model.config
    print(f"kvpress_oracle: kvpress {version('kvpress')} "
          f"transformers {transformers.__version__} torch {torch.__version__}; {len(ids)} tokens; "
          f"model loaded in {time.time() - t0:.1f} s", file=sys.stderr)
    x = torch.tensor([ids], dtype=torch.long)

    result = {
        "text": os.path.basename(args.text),
        "tokens": [int(i) for i in ids],
        "num_layers": c.num_hidden_layers,
        "num_heads": c.num_attention_heads,
        "num_kv_heads": c.num_key_value_heads,
        "versions": {"kvpress": version("kvpress"), "transformers": transformers.__version__,
                     "torch": torch.__version__},
        "presses": [],
    }
    observed_scores = {}
    for name in ("streaming_llm", "observed_attention"):
        if name == "streaming_llm":
            presses = [StreamingLLMPress(compression_ratio=r, n_sink=N_SINK) for r in RATIOS]
            kept = run_presses(model, x, presses)
        else:
            presses = [ObservedAttentionPress(compression_ratio=r) for r in RATIOS]
            kept = run_presses(model, x, presses, observed_scores)
        for ratio, press_kept in zip(RATIOS, kept):
            n_kept = len(press_kept[0][0])
            assert all(len(head) == n_kept for layer in press_kept for head in layer)
            entry = {"press": name, "compression_ratio": ratio, "n_kept": n_kept, "kept": press_kept}
            if name == "streaming_llm":
                entry["n_sink"] = N_SINK
            result["presses"].append(entry)
            print(f"kvpress_oracle: {name} ratio {ratio}: keeps {n_kept} of {len(ids)} per layer and KV head",
                  file=sys.stderr)
    # ObservedAttentionPress's scores come from the prefill's attention alone: one set for both ratios.
    result["observed_attention_scores"] = [observed_scores[layer] for layer in range(c.num_hidden_layers)]

    with open(args.out + ".partial", "w") as f:
        json.dump(result, f)
    os.replace(args.out + ".partial", args.out)
    print(f"kvpress_oracle: wrote {args.out} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
