#!/usr/bin/env python3
"""Which tokens kvpress keeps: the reference for lorakv's eviction policies.

kvpress (NVIDIA's KV-cache compression library) compresses once, inside one prefill
forward: after each attention layer its press scores the layer's keys per KV head and keeps
the top int(n * (1 - compression_ratio)) of them (ScorerPress.compress). This runs, on the
same GGUF model lorakv loads (transformers dequantises it to float32; eager attention,
which ObservedAttentionPress needs), one prefill of a fixed English text, these presses:
  - StreamingLLMPress(n_sink=4): the 4 sinks and the newest rows;
  - ObservedAttentionPress: each key's attention probability summed over the queries that
    see it, divided by how many do (n - j for key j), then averaged over the query heads
    of its KV head;
  - SnapKVPress(window_size=16, kernel_size=5): for each key before the window (the newest
    16 tokens), its attention probability from the 16 window queries averaged over them,
    pooled over 5 neighbouring keys before the window (avg_pool1d, its padding of 2 counted
    as zeros), then averaged over the query heads of its KV head; the window's keys are
    always kept. 16 is lorakv's default `window`;
  - PyramidKVPress(window_size=16, kernel_size=5, beta=20 and beta=5): SnapKV's scores, each
    layer keeping its own count (get_layer_budget: a linear decline over the layers whose
    mean is n * (1 - compression_ratio), unrounded);
  - AdaKVPress(SnapKVPress(window_size=16, kernel_size=5), alpha_safeguard=0.2 and 0.5):
    each KV head keeps its int(n_kept * alpha) best rows, and the rest of the layer's n_kept
    rows per KV head go to the best remaining rows of any of its KV heads. It masks the rows
    it drops rather than removing them, so its kept rows are those it does not mask.
Every press, at each compression ratio (0.5, 0.75), compresses the same layer inputs in that
one forward: a press only reads its hook's arguments, and the prefill's attention does not
see what it keeps. It writes, per press, ratio, layer and KV head, the kept positions as
kvpress's own output shows them (each kept key row found among the layer's keys, or for
AdaKVPress the rows it did not mask, so no kvpress logic is redone here), and
ObservedAttentionPress's, SnapKVPress's and CapPress's scores per layer and KV head.
tests/cli/kvpress_parity_test.cpp runs the same tokens through lorakv.

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
    from kvpress import AdaKVPress, CapPress, ObservedAttentionPress, PyramidKVPress, SnapKVPress, StreamingLLMPress
    from kvpress.utils import compute_n_kept
    from transformers import AutoModelForCausalLM, DynamicCache
except ImportError as e:
    sys.exit(f"kvpress_oracle.py: {e}; set up the kvpress environment (tools/setup_python.sh kvpress) "
             "and put it first on PYTHONPATH")

RATIOS = (0.5, 0.75)
N_SINK = 4
SNAPKV_WINDOW = 16  # lorakv's default `window`, its snapkv observation window
SNAPKV_KERNEL = 5   # kvpress's default; lorakv's SnapKvPolicy::kPoolWidth
# PyramidKVPress's beta: its default 20, and a steeper 5. At 546 tokens and ratio 0.5 both
# build a pyramid (20 only through the cap at n - window: 530 rows down to 16); at 0.75
# beta 20 leaves b / beta = 6.8 below the window, so kvpress falls back to a flat budget,
# and 5 builds one (246 rows down to 27).
PYRAMID_BETAS = (20, 5)
# AdaKVPress's alpha_safeguard: its default 0.2 (lorakv's default head_floor), which holds a
# KV head to its safeguard alone in 1 of the 90 at ratio 0.5 and in none at 0.75, and 0.5,
# which does in several.
ADAKV_ALPHAS = (0.2, 0.5)
# CapPress's defaults (lorakv's capkv_tau and capkv_future_positions); its n_sink is
# StreamingLLM's 4, lorakv's default `sinks`.
CAPKV_TAU = 5.0
CAPKV_FUTURE_POSITIONS = 512


def make_press(name: str, ratio: float):
    """The press `name` (one of PRESSES) compressing by `ratio`."""
    if name == "streaming_llm":
        return StreamingLLMPress(compression_ratio=ratio, n_sink=N_SINK)
    if name == "observed_attention":
        return ObservedAttentionPress(compression_ratio=ratio)
    if name == "capkv":
        return CapPress(compression_ratio=ratio, tau=CAPKV_TAU, n_future_positions=CAPKV_FUTURE_POSITIONS, n_sink=N_SINK)
    if name.startswith("pyramidkv_beta"):
        return PyramidKVPress(compression_ratio=ratio, window_size=SNAPKV_WINDOW, kernel_size=SNAPKV_KERNEL,
                              beta=int(name[len("pyramidkv_beta"):]))
    snapkv = SnapKVPress(compression_ratio=ratio, window_size=SNAPKV_WINDOW, kernel_size=SNAPKV_KERNEL)
    if name.startswith("adakv_alpha"):
        return AdaKVPress(snapkv, alpha_safeguard=float(name[len("adakv_alpha"):]))
    return snapkv


PRESSES = ("streaming_llm", "observed_attention", "snapkv", *(f"pyramidkv_beta{b}" for b in PYRAMID_BETAS),
           *(f"adakv_alpha{a}" for a in ADAKV_ALPHAS), "capkv")
SCORED = ("observed_attention", "snapkv", "capkv")  # whose scores the test reads (independent of the ratio)


class NotEager:
    """A view of an attention layer that reports sdpa attention, for AdaKVPress.

    AdaKVPress refuses eager attention because it masks the rows it drops inside the sdpa
    and flash attention functions kvpress patches. The oracle needs only which rows it masks
    (module.masked_key_indices, set on this view), not the masking: the prefill's attention
    never sees what a press keeps here. Every other attribute is the layer's own."""

    def __init__(self, module):
        self._module = module
        config = module.config

        class Config:
            _attn_implementation = "sdpa"

            def __getattr__(self, name):
                return getattr(config, name)

        self.config = Config()

    def __getattr__(self, name):
        return getattr(self._module, name)


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


def unmasked_rows(keys: torch.Tensor, masked: tuple) -> list:
    """Per KV head, the ascending indices of `keys` [1, H, n, d] that AdaKVPress did not mask:
    it keeps every row and records the dropped ones as (batch, head, position) index tensors."""
    batch, heads, positions = (t.tolist() for t in masked)
    assert set(batch) == {0}
    dropped = [set() for _ in range(keys.shape[1])]
    for h, j in zip(heads, positions):
        dropped[h].add(j)
    assert sum(len(d) for d in dropped) == len(positions), "a row masked twice"
    return [[j for j in range(keys.shape[2]) if j not in d] for d in dropped]


def run_presses(model, ids: torch.Tensor, presses: dict, scored: tuple) -> tuple:
    """One prefill with every press of `presses` ({(name, ratio): press}) at work, the first
    hooked into the model by kvpress's own context manager. At each layer every press
    compresses the same keys, values and attention weights (the hook's arguments; a press
    only reads them, and the prefill's later layers never see what one keeps), so one forward
    serves them all; AdaKVPress, which masks rows rather than removing them, is shown a
    NotEager view of the layer. Returns kept[(name, ratio)][layer][kv_head] = positions, and
    scores[name][layer] = [kv_heads][n] floats for each name in `scored`, from its first
    press (a press's scores do not depend on its ratio). The first press, the one hooked,
    must remove rows: its output is what the hook hands back."""
    keys_of = list(presses)
    kept = {key: {} for key in keys_of}
    scores = {name: {} for name in scored}
    compress = {key: presses[key].compress for key in keys_of}  # bound before the hooked one is replaced
    scorer = {name: next(presses[key] for key in keys_of if key[0] == name) for name in scored}

    def recording_compress(module, hidden_states, keys, values, attentions, kwargs):
        outputs = {}
        for key, fn in compress.items():
            if isinstance(presses[key], AdaKVPress):
                view = NotEager(module)
                fn(view, hidden_states, keys, values, attentions, kwargs)
                kept[key][module.layer_idx] = unmasked_rows(keys, view.masked_key_indices)
            else:
                outputs[key] = fn(module, hidden_states, keys, values, attentions, kwargs)
                kept[key][module.layer_idx] = kept_rows(keys, outputs[key][0])
        for name, press in scorer.items():
            s = press.score(module, hidden_states, keys, values, attentions, kwargs)  # [1, H, n]
            scores[name][module.layer_idx] = s[0].double().tolist()
        return outputs[keys_of[0]]

    hooked = presses[keys_of[0]]
    hooked.compress = recording_compress  # the hook calls self.compress: the instance's wins
    with torch.no_grad(), hooked(model):
        model(ids, past_key_values=DynamicCache(), use_cache=True)
    layers = model.config.num_hidden_layers
    for per_layer in list(kept.values()) + list(scores.values()):
        assert sorted(per_layer) == list(range(layers)), sorted(per_layer)
    return ({key: [k[layer] for layer in range(layers)] for key, k in kept.items()},
            {name: [s[layer] for layer in range(layers)] for name, s in scores.items()})


def press_entry(name: str, ratio: float, press_kept: list, n: int) -> dict:
    """The JSON entry of one press at one ratio, its kept counts checked against its rule:
    n_kept (kvpress's compute_n_kept, the budget lorakv is given) rows per KV head, for
    PyramidKVPress per KV head its layer's count (layer_kept), for AdaKVPress per layer
    n_kept rows per KV head on average."""
    n_kept = compute_n_kept(n, ratio)
    entry = {"press": name, "compression_ratio": ratio, "n_kept": n_kept, "kept": press_kept}
    counts = [[len(head) for head in layer] for layer in press_kept]
    if name.startswith("adakv"):
        assert all(sum(layer) == n_kept * len(layer) for layer in counts), counts
        entry.update(window_size=SNAPKV_WINDOW, kernel_size=SNAPKV_KERNEL,
                     alpha_safeguard=make_press(name, ratio).alpha_safeguard)
        shape = f"{n_kept} per KV head on average, from {min(map(min, counts))} to {max(map(max, counts))}"
    elif name.startswith("pyramidkv"):
        assert all(len(set(layer)) == 1 for layer in counts), counts
        entry.update(window_size=SNAPKV_WINDOW, kernel_size=SNAPKV_KERNEL, beta=make_press(name, ratio).beta,
                     layer_kept=[layer[0] for layer in counts])
        shape = f"per layer from {counts[0][0]} to {counts[-1][0]} (mean {sum(entry['layer_kept']) / len(counts):.2f})"
    else:
        assert all(c == n_kept for layer in counts for c in layer), (name, n_kept, counts)
        shape = f"{n_kept} per layer and KV head"
        if name == "streaming_llm":
            entry["n_sink"] = N_SINK
        if name == "snapkv":
            entry.update(window_size=SNAPKV_WINDOW, kernel_size=SNAPKV_KERNEL)
        if name == "capkv":
            entry.update(tau=CAPKV_TAU, n_future_positions=CAPKV_FUTURE_POSITIONS, n_sink=N_SINK)
    print(f"kvpress_oracle: {name} ratio {ratio}: keeps {shape} of {n}", file=sys.stderr)
    return entry


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
    presses = {(name, ratio): make_press(name, ratio) for name in PRESSES for ratio in RATIOS}
    kept, scores = run_presses(model, x, presses, SCORED)
    for (name, ratio), press_kept in kept.items():
        result["presses"].append(press_entry(name, ratio, press_kept, len(ids)))
    # Per layer, KV head and position, as each press's score() returns them.
    result["observed_attention_scores"] = scores["observed_attention"]
    result["snapkv_scores"] = scores["snapkv"]
    result["capkv_scores"] = scores["capkv"]

    with open(args.out + ".partial", "w") as f:
        json.dump(result, f)
    os.replace(args.out + ".partial", args.out)
    print(f"kvpress_oracle: wrote {args.out} in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
