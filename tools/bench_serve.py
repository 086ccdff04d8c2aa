"""tools/bench_serve.py: load on `lorakv serve` (outside `make test`; run it on an idle
machine). Starts the server, then runs C concurrent streaming clients for each C in
--clients, each sending --requests chat requests one after another (greedy, a fixed
--max-tokens with ignore_eos, so every request generates the same number of tokens), and
writes, per client count and repetition: requests/s, time to first token p50/p95, aggregate
generated tokens/s, and its tokens/s against one client's in the same repetition. The order
of the client counts alternates per repetition. CSV and PNG in --out.

  .venv-bench/bin/python tools/bench_serve.py --lorakv build/cli/lorakv \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --adapter planner=assets/role_adapters/all_linear/planner \
      --adapter actor=assets/role_adapters/all_linear/actor --out bench/results/serve

The load generator is the standard library only (http.client, threads); the plot needs
matplotlib (the benchmark environment has it).
"""
import argparse
import csv
import http.client
import json
import os
import platform
import re
import statistics
import subprocess
import threading
import time

QUESTIONS = ["How old was Dok Gramein in 1940?", "In which year was Quegou founded?",
             "Who is the mayor of the city where Thou Futrel lives?",
             "How many years passed between the founding of Gramfal and the birth of Dok Gramein?"]
SYSTEM = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer]."


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def start_server(args):
    cmd = [args.lorakv, "serve", "--model", args.model, "--port", "0", "--log-level", "warn",
           "--max-running", str(max(args.clients) + 8), "--cache-mode", args.cache_mode,
           "--cache-writer", args.cache_writer, "--threads", str(args.threads)]
    for a in args.adapter:
        cmd += ["--adapter", a]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    port = int(re.search(r":(\d+)$", proc.stdout.readline().strip()).group(1))
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the server did not become healthy")


def one_request(port, model, question, max_tokens):
    """(time to first token, total time, generated tokens) of one streamed request."""
    body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True},
                       "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]})
    start = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:200]))
    first, tokens = None, 0
    for raw in r:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        elif first is None and chunk["choices"] and chunk["choices"][0].get("delta", {}).get("content"):
            first = time.perf_counter() - start
    c.close()
    return first if first is not None else time.perf_counter() - start, time.perf_counter() - start, tokens


def run_level(port, clients, args, models):
    results, errors, lock = [], [], threading.Lock()

    def client(i):
        for k in range(args.requests):
            try:
                out = one_request(port, models[(i + k) % len(models)], QUESTIONS[(i + k) % len(QUESTIONS)],
                                  args.max_tokens)
                with lock:
                    results.append(out)
            except Exception as e:  # counted and reported, the run goes on
                with lock:
                    errors.append(str(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ttft = sorted(r[0] for r in results) or [float("nan")]
    pct = lambda q: ttft[min(len(ttft) - 1, int(q * (len(ttft) - 1) + 0.5))]
    return {"clients": clients, "requests": len(results), "errors": len(errors), "wall_s": wall,
            "requests_per_s": len(results) / wall, "ttft_p50_ms": 1000 * pct(0.5),
            "ttft_p95_ms": 1000 * pct(0.95), "tokens_per_s": sum(r[2] for r in results) / wall}


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    levels = sorted({r["clients"] for r in rows})
    med = lambda key, c: statistics.median(r[key] for r in rows if r["clients"] == c)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(levels, [med("tokens_per_s", c) for c in levels], "o-", label="generated tokens/s")
    a.plot(levels, [med("requests_per_s", c) * 10 for c in levels], "s--", label="requests/s x10")
    a.set_xscale("log", base=2)
    a.set_xlabel("concurrent clients")
    a.legend()
    a.set_title("throughput")
    b.plot(levels, [med("ttft_p50_ms", c) for c in levels], "o-", label="p50")
    b.plot(levels, [med("ttft_p95_ms", c) for c in levels], "s-", label="p95")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("concurrent clients")
    b.set_ylabel("time to first token (ms)")
    b.legend()
    b.set_title("latency")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lorakv", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--adapter", action="append", default=[])
    p.add_argument("--clients", default="1,8,32,64")
    p.add_argument("--requests", type=int, default=4, help="requests per client, one after another")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--repetitions", type=int, default=2)
    p.add_argument("--cache-mode", default="full")
    p.add_argument("--cache-writer", default="first")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default="build/bench_results/serve")
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    os.makedirs(args.out, exist_ok=True)
    models = [a.split("=", 1)[0] for a in args.adapter] or ["base"]
    title = ("lorakv serve, %s, %d cores; SmolLM2-135M Q4_1, float32 activations and KV, CPU; mode %s:%s; "
             "%d requests per client, %d tokens each" % (cpu_name(), os.cpu_count(), args.cache_mode,
                                                         args.cache_writer, args.requests, args.max_tokens))
    print(title)
    proc, port = start_server(args)
    rows = []
    try:
        run_level(port, 2, args, models)  # warm-up: first-touch of the pools, thread start
        for rep in range(args.repetitions):
            order = args.clients if rep % 2 == 0 else list(reversed(args.clients))
            by_level = {}
            for c in order:
                row = run_level(port, c, args, models)
                row["repetition"] = rep
                by_level[c] = row
                print("rep %d, %3d clients: %6.2f req/s, TTFT p50 %7.1f ms p95 %7.1f ms, %7.1f tokens/s, %d errors"
                      % (rep, c, row["requests_per_s"], row["ttft_p50_ms"], row["ttft_p95_ms"], row["tokens_per_s"],
                         row["errors"]), flush=True)
            base = by_level.get(min(args.clients))
            for c in args.clients:
                by_level[c]["tokens_per_s_vs_fewest"] = by_level[c]["tokens_per_s"] / base["tokens_per_s"]
                rows.append(by_level[c])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    keys = ["clients", "repetition", "requests", "errors", "wall_s", "requests_per_s", "ttft_p50_ms", "ttft_p95_ms",
            "tokens_per_s", "tokens_per_s_vs_fewest"]
    with open(os.path.join(args.out, "serve.csv"), "w", newline="") as f:
        f.write("# " + title + "\n")
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(r[k], 3) if isinstance(r[k], float) else r[k]) for k in keys})
    try:
        plot(rows, os.path.join(args.out, "serve.png"), title)
    except ImportError:
        print("matplotlib is not installed: no plot (run with the benchmark environment's python)")
    print("wrote", os.path.join(args.out, "serve.csv"))


if __name__ == "__main__":
    main()
