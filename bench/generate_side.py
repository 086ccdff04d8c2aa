#!/usr/bin/env python3
"""One reference side of bench/generate_bench.cpp, kept running between measurements so the
driver can alternate sides per repetition: llama.cpp (llama-cpp-python, its eval loop)
or transformers (the GGUF dequantised to float32), on the same model file and prompt ids.

Protocol (one request per stdin line, one reply per stdout line):
  prefill             -> "<seconds>"  one forward over the first prompt, fresh cache
  decode <B> <steps>  -> "<seconds> <ids of sequence 0>"  the first B prompts prefilled
                         (untimed), then <steps> greedy one-token steps each, timed
                         (llama.cpp: around its eval loop, not a Python generator).
                         transformers runs the B sequences as one batch; llama.cpp one
                         after another (its high-level API decodes one sequence), so its
                         time is the sum over sequences.
  quit
The first line written is "ready <description>" once the model is loaded.

usage: generate_side.py {llama_cpp,transformers} --model FILE --ids FILE --threads N
"""
import argparse
import ctypes
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def request_amx_permission() -> None:
    """Linux hands out AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM); a
    llama.cpp built with AMX faults without it. Harmless where there is no AMX."""
    try:
        ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18)
    except OSError:
        pass


class LlamaCppSide:
    def __init__(self, model: str, threads: int, prompts):
        request_amx_permission()
        import llama_cpp
        self.prompts = prompts
        n_ctx = max(len(p) for p in prompts) + 256
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)
        info = llama_cpp.llama_print_system_info().decode().strip()
        self.description = f"llama-cpp-python {llama_cpp.__version__}, {threads} threads, {info}"

    def prefill(self) -> float:
        start = time.perf_counter()
        self.llm.reset()
        self.llm.eval(self.prompts[0])
        self.llm.sample(temp=0.0)  # greedy next token from the prompt's last logits
        return time.perf_counter() - start

    def decode(self, batch: int, steps: int):
        """Greedy around llama.cpp's own eval loop (Llama.eval, one llama_decode per token,
        and its greedy sampler): the prompt's evaluation and first token untimed, then
        `steps` one-token evals and samples timed."""
        total, first = 0.0, []
        for b in range(batch):
            self.llm.reset()
            self.llm.eval(self.prompts[b])
            token = self.llm.sample(temp=0.0, top_k=1, repeat_penalty=1.0)
            ids = [token]
            start = time.perf_counter()
            for _ in range(steps):
                self.llm.eval([token])
                token = self.llm.sample(temp=0.0, top_k=1, repeat_penalty=1.0)
                ids.append(token)
            total += time.perf_counter() - start
            if b == 0:
                first = ids
        return total, first


class TransformersSide:
    def __init__(self, model: str, threads: int, prompts):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
        transformers.utils.logging.disable_progress_bar()
        torch.set_num_threads(threads)
        self.torch = torch
        model_dir, model_file = os.path.split(os.path.abspath(model))
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32)
        self.model.eval()
        self.prompts = torch.tensor(prompts, dtype=torch.long)
        self.description = (f"transformers {transformers.__version__}, torch {torch.__version__}, "
                            f"{torch.get_num_threads()} threads, float32, {self.model.config._attn_implementation}")

    def prefill(self) -> float:
        with self.torch.inference_mode():
            start = time.perf_counter()
            out = self.model(self.prompts[:1], use_cache=True)
            int(out.logits[0, -1].argmax())
            return time.perf_counter() - start

    def decode(self, batch: int, steps: int):
        with self.torch.inference_mode():
            out = self.model(self.prompts[:batch], use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            ids = [int(nxt[0, 0])]
            start = time.perf_counter()
            for _ in range(steps):
                o = self.model(nxt, past_key_values=past, use_cache=True)
                past, nxt = o.past_key_values, o.logits[:, -1].argmax(-1, keepdim=True)
                ids.append(int(nxt[0, 0]))
            return time.perf_counter() - start, ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("side", choices=["llama_cpp", "transformers"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="one prompt per line, space-separated token ids")
    ap.add_argument("--threads", type=int, required=True)
    args = ap.parse_args()
    with open(args.ids) as f:
        prompts = [[int(t) for t in line.split()] for line in f if line.strip()]
    side = (LlamaCppSide if args.side == "llama_cpp" else TransformersSide)(args.model, args.threads, prompts)
    print("ready " + side.description.replace("\n", " "), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "prefill":
            print(f"{side.prefill():.9f}", flush=True)
        elif words[0] == "decode":
            seconds, ids = side.decode(int(words[1]), int(words[2]))
            print(f"{seconds:.9f} " + " ".join(str(t) for t in ids), flush=True)
        else:
            print(f"error unknown request {words[0]!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
