#!/usr/bin/env python3
"""Train one role's LoRA adapter (PEFT) on the agentic QA trajectories.

One forward per trajectory: the loss covers only the role's own spans (turn text plus
its <|im_end|>), and the LM head runs only at those positions. The trajectory is cut
after the role's last trained span. `--shared-a-from DIR` copies v_proj's lora_A from
another adapter (the planner's) and freezes it, as LRAgent does for its shared-A set.
The saved adapter is PEFT's layout with the tensors rewritten in float16.

`--alora` trains an activated LoRA (PEFT's alora_invocation_tokens = the role's turn header
"<|im_start|>{role}\n"): it adapts only from the last occurrence of its header on, so its
K/V over the shared trajectory are the base model's and lorakv shares them exactly
(docs/sharing_modes.md). Only the span after the last header is adapted, so each
(trajectory, role span) is one example, cut after that span, with that span's loss; the
optimizer steps and batch stay those of the standard sets (more, shorter examples).

usage: train_roles.py --role planner --targets q_proj,v_proj --out DIR [--shared-a-from DIR] [--alora] ...
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (DATA_DIR, REPO, ROLES, VERDICTS, Tokenizer, load_base_model,  # noqa: E402
                    read_jsonl, tokenize_turns, turns_of)

from alora_forward import offsets_hooks  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

ALL_LINEAR = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
PAD_ID = 2


Example = tuple[list[int], list[int], list[float]]


def build_example(tok: Tokenizer, rec: dict[str, Any], role: str, verdict_ids: tuple[int, ...],
                  verdict_weight: float) -> Example | None:
    """(ids, label positions, label weights) for one trajectory; position t predicts ids[t + 1].

    The sequence is cut after the role's last trained span; None if it has none. The
    reflector's verdict token (`... Verdict: right|wrong.<|im_end|>`, third from the end)
    gets `verdict_weight`: one token among ~20 of easy copying would otherwise be a
    twentieth of the loss, and the first reflectors left it at chance.
    """
    segs = tokenize_turns(tok, turns_of(rec))
    ids: list[int] = []
    pos: list[int] = []
    wts: list[float] = []
    end = 0
    for s in segs:
        if s.role == role and s.train:
            start = len(ids)
            pos.extend(range(start - 1, start + len(s.ids) - 1))
            w = [1.0] * len(s.ids)
            if role == "reflector":
                assert s.ids[-3] in verdict_ids, f"{rec['id']}: no verdict token third from the end"
                w[-3] = verdict_weight
            wts.extend(w)
            end = start + len(s.ids)
        ids.extend(s.ids)
    if not pos:
        return None
    return ids[:end], pos, wts


def span_examples(example: Example, starts: list[int]) -> list[Example]:
    """An aLoRA role's examples: one per span of `example` (label runs starting at `starts`),
    each cut after its span with that span's labels only."""
    ids, pos, wts = example
    out: list[Example] = []
    for k, first in enumerate(starts):
        last = starts[k + 1] if k + 1 < len(starts) else len(pos)
        span_pos, span_wts = pos[first:last], wts[first:last]
        out.append((ids[:span_pos[-1] + 2], span_pos, span_wts))
    return out


def span_starts(pos: list[int]) -> list[int]:
    """Indices in `pos` where a new run of consecutive label positions begins."""
    return [i for i in range(len(pos)) if i == 0 or pos[i] != pos[i - 1] + 1]


def batches(examples: list[Example], batch: int, steps: int,
            rng: random.Random) -> list[list[int]]:
    """`steps` batches of example indices: epochs of shuffled data, similar lengths grouped."""
    out: list[list[int]] = []
    while len(out) < steps:
        order = list(range(len(examples)))
        rng.shuffle(order)
        chunk = batch * 8
        epoch: list[list[int]] = []
        for c in range(0, len(order), chunk):
            part = sorted(order[c:c + chunk], key=lambda i: len(examples[i][0]))
            epoch.extend(part[b:b + batch] for b in range(0, len(part), batch) if len(part[b:b + batch]) == batch)
        rng.shuffle(epoch)
        out.extend(epoch)
    return out[:steps]


def collate(examples: list[Example], idx: list[int]) -> tuple[torch.Tensor, ...]:
    """Right-padded ids [B, T] and the flat (row, position, target, weight) of every label."""
    T = max(len(examples[i][0]) for i in idx)
    x = torch.full((len(idx), T), PAD_ID, dtype=torch.long)
    rows, cols, wts = [], [], []
    for r, i in enumerate(idx):
        ids, pos, w = examples[i]
        x[r, :len(ids)] = torch.tensor(ids)
        rows.extend([r] * len(pos))
        cols.extend(pos)
        wts.extend(w)
    rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
    return x, rows_t, cols_t, x[rows_t, cols_t + 1], torch.tensor(wts, dtype=torch.float32)


def role_logits(lm: Any, x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, bf16: bool,
                peft_model: Any = None) -> torch.Tensor:
    """Logits [labels, V] (float32) at the label positions; the LM head runs only there.

    Right padding needs no attention mask: causal attention keeps pads out of real tokens.
    With `peft_model` (an aLoRA), each row's activation offset is found as PEFT's forward finds
    it (the last occurrence of the invocation tokens) and passed to the LoRA layers: calling
    the decoder directly bypasses PEFT's forward, and without offsets aLoRA adapts nothing.
    """
    with offsets_hooks(peft_model, x), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        h = lm.model(input_ids=x).last_hidden_state
        return lm.lm_head(h[rows, cols]).float()


def weighted_ce(logits: torch.Tensor, tgt: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
    """Weighted mean cross-entropy: sum(w * ce) / sum(w)."""
    ce = torch.nn.functional.cross_entropy(logits, tgt, reduction="none")
    return (ce * wts).sum() / wts.sum()


def evaluate(lm: Any, val: list[Example], batch: int, verdict_ids: tuple[int, ...],
             peft_model: Any = None) -> tuple[float, int, int, int]:
    """(mean label loss, label count, verdicts right, verdicts) on val, float32, unweighted loss.

    A verdict is right when its gold token is the argmax (greedy decoding would emit it).
    """
    tot, cnt, vk, vn = 0.0, 0, 0, 0
    with torch.no_grad():
        for b in range(0, len(val), batch):
            idx = list(range(b, min(len(val), b + batch)))
            x, rows, cols, tgt, _ = collate(val, idx)
            logits = role_logits(lm, x, rows, cols, False, peft_model)
            tot += torch.nn.functional.cross_entropy(logits, tgt, reduction="sum").item()
            cnt += len(tgt)
            is_verdict = torch.tensor([int(t) in verdict_ids for t in tgt])
            vk += int((logits[is_verdict].argmax(-1) == tgt[is_verdict]).sum())
            vn += int(is_verdict.sum())
    return tot / max(1, cnt), cnt, vk, vn


def save_fp16(model: Any, out: Path, base_name: str) -> None:
    """save_pretrained (safetensors), then rewrite the tensors in float16 and fix the config."""
    model.save_pretrained(str(out), safe_serialization=True)
    f = out / "adapter_model.safetensors"
    tensors = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(f)).items()}
    save_file(tensors, str(f), metadata={"format": "pt"})
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = base_name
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    (out / "README.md").unlink(missing_ok=True)  # PEFT's empty model card
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=ROLES, required=True)
    ap.add_argument("--targets", default="q_proj,v_proj", help=f"comma list, or 'all' for {ALL_LINEAR}")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shared-a-from", type=Path, default=None,
                    help="adapter dir whose v_proj lora_A is copied and frozen")
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--val-n", type=int, default=32, help="val trajectories for the final loss")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward/backward")
    ap.add_argument("--verdict-weight", type=float, default=1.0,
                    help="loss weight of the reflector's right/wrong token (others weigh 1)")
    ap.add_argument("--eval-every", type=int, default=0, help="log val loss (and verdict accuracy) every N steps")
    ap.add_argument("--alora", action="store_true",
                    help="an activated LoRA invoked by the role's turn header: one example per role span")
    args = ap.parse_args()
    if args.alora and args.shared_a_from is not None:
        ap.error("--alora reads no residual rows: a shared A means nothing for it (drop --shared-a-from)")

    t_start = time.time()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    targets = ALL_LINEAR.split(",") if args.targets == "all" else args.targets.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    log_f = open(args.out / "train_log.txt", "w", encoding="utf-8")

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_f.write(msg + "\n")
        log_f.flush()

    rel = lambda p: str(Path(p).resolve().relative_to(REPO)) if Path(p).resolve().is_relative_to(REPO) else str(p)  # noqa: E731
    log("command: nice -n 10 .venv/bin/python " + rel(__file__) + " " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    # paths relative to the repository, so logs name no machine's folders
    log(f"config: {json.dumps({k: rel(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, sort_keys=True)}")
    log(f"torch {torch.__version__}, threads {torch.get_num_threads()}")

    tok = Tokenizer()
    verdict_ids = tuple(tok.encode(" " + v)[0] for v in VERDICTS) if args.role == "reflector" else ()

    def examples(split: str) -> list[Example]:
        recs = read_jsonl(args.data / f"{split}.jsonl")
        whole = [e for e in (build_example(tok, r, args.role, verdict_ids, args.verdict_weight) for r in recs) if e]
        if not args.alora:
            return whole
        return [s for e in whole for s in span_examples(e, span_starts(e[1]))]

    train = examples("train")
    val = examples("val")[:args.val_n]
    n_tok = sum(len(e[0]) for e in train) / len(train)
    n_lab = sum(len(e[1]) for e in train) / len(train)
    log(f"data: {len(train)} train examples (mean {n_tok:.1f} tokens, {n_lab:.1f} label tokens), {len(val)} val"
        + (" (aLoRA: one per role span)" if args.alora else ""))

    from peft import LoraConfig, get_peft_model

    base = load_base_model()
    invocation = tok.encode(f"<|im_start|>{args.role}\n") if args.alora else None
    cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=targets, lora_dropout=0.0,
                     bias="none", task_type="CAUSAL_LM", alora_invocation_tokens=invocation)
    model = get_peft_model(base, cfg)
    alora_model = model if args.alora else None
    if args.alora:
        log(f"aLoRA: invocation tokens {invocation} (the {args.role} turn header)")
    lm = model.base_model.model
    if args.shared_a_from is not None:
        src = load_file(str(args.shared_a_from / "adapter_model.safetensors"))
        params = dict(model.named_parameters())
        n = 0
        for k, v in src.items():
            if ".v_proj.lora_A." in k:
                name = k.replace(".lora_A.weight", ".lora_A.default.weight")
                with torch.no_grad():
                    params[name].copy_(v.to(torch.float32))
                params[name].requires_grad_(False)
                n += 1
        assert n == base.config.num_hidden_layers, f"copied {n} v_proj lora_A tensors"
        log(f"shared A: copied and froze {n} v_proj lora_A from {rel(args.shared_a_from)}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    log(f"trainable parameters: {sum(p.numel() for p in trainable)}")
    model.train()
    opt = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0)

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    plan = batches(train, args.batch, args.steps, rng)
    t0 = time.time()
    seen_tok = 0
    for step, idx in enumerate(plan):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, rows, cols, tgt, wts = collate(train, idx)
        loss = weighted_ce(role_logits(lm, x, rows, cols, args.bf16, alora_model), tgt, wts)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seen_tok += x.numel()
        dt = time.time() - t0
        log(f"step {step + 1}/{args.steps} loss {loss.item():.4f} lr {lr_at(step):.2e} "
            f"tokens {x.numel()} elapsed {dt:.0f}s throughput {seen_tok / dt:.0f} tok/s")
        if args.eval_every and (step + 1) % args.eval_every == 0 and step + 1 < args.steps:
            model.eval()
            vl, _, vk, vn = evaluate(lm, val, args.batch, verdict_ids, alora_model)
            model.train()
            log(f"  val loss {vl:.4f}" + (f" verdict {vk}/{vn}" if vn else ""))

    model.eval()
    vl, cnt, vk, vn = evaluate(lm, val, args.batch, verdict_ids, alora_model)
    log(f"val loss (fp32, {len(val)} trajectories, {cnt} label tokens): {vl:.4f}"
        + (f", verdict argmax {vk}/{vn}" if vn else ""))
    save_fp16(model, args.out, "HuggingFaceTB/SmolLM2-135M-Instruct")
    if args.shared_a_from is not None:
        a = load_file(str(args.shared_a_from / "adapter_model.safetensors"))
        b = load_file(str(args.out / "adapter_model.safetensors"))
        keys = [k for k in a if ".v_proj.lora_A." in k]
        same = all(torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)) for k in keys)
        log(f"shared v_proj lora_A bitwise equal to {rel(args.shared_a_from)}: {same} ({len(keys)} tensors)")
        assert same
    log(f"saved {rel(args.out)} in {time.time() - t_start:.0f}s total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
