// cli/bench/bench_command.cpp: `lorakv bench memory`: flags, the machine line, the three parts
// (cli/bench/bench_memory_grid.cpp, bench_fidelity.cpp, bench_latency.cpp) and the plot.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/cli/cli.h"
#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/subprocess.h"

namespace lorakv::cli {

namespace {

const char* kBenchHelp = R"(usage: lorakv bench <benchmark> [flags]

Benchmarks and evaluations, each with its own flags ('lorakv bench <benchmark> --help').
Run them with nothing else on the machine: they compare sides as ratios measured in one
run. Times are for their defaults on 2 cores.

  memory           N agents on one shared trajectory in every sharing mode: KV bytes
                   against N full caches, fidelity against full, time to first token
                   and 8-agent decode (about 8 minutes; --full about an hour)
  sessions         S concurrent sessions through the sessions API's scheduler against
                   sequential and driver sides; the shared decode step of 8 agents;
                   admission in a pool that just fits (about 9 minutes)
  requests         one-message requests through a request handle against the sessions
                   API: time to first token, aggregate tokens/s of 16 concurrent
                   requests (about 3 minutes)
  episodes         the agentic QA task in each sharing mode and writer: success rate
                   against full, KV bytes per episode (about an hour per adapter set for
                   its 360 questions; --n 20 about 4 minutes)
  eviction         KV eviction policies: perplexity and retrieval against the budget,
                   three role agents on an evicted trajectory, int8 KV composed with
                   eviction (about 23 minutes)
  eviction-layout  what one eviction costs the paged cache in its two layouts, release and
                   mask against packing (about 1.5 minutes)

Kernel and generation benchmarks against llama.cpp and transformers are executables of
the build, run with 'make bench' (LORAKV_BENCH=attention, generate, quant or memory).
)";

const char* kHelp = R"(usage: lorakv bench memory [flags]

N agents (LoRA adapters) on one shared trajectory of real text, in every sharing mode
(full, full_shared, base_shared, base_lr_shared): KV bytes measured from the cache's pools
next to the closed form and the ratio against N full caches; teacher-forced fidelity
against full (per-token KL, top-1 agreement) with the trained role adapters; time to first
token of a joining agent and aggregate decode of 8 agents, as ratios against full. Each
part also runs activated LoRA (aLoRA) twins of the adapters (the same factors, invoked by
their turn header): 1 to 16 aLoRA agents on the longest trajectory, their fidelity against
their own exact forward, and their time to first token and decode. The alora_reply part
times what an aLoRA reply's base rows cost: processed again at commit (a batch), against a
base-weight row beside each of its decode steps; and a writer author reply processed again
at commit (plain) against one whose rows were kept while it decoded (fast).
The fidelity part also writes KL and top-1 per role and per the role's turn ordinal
(fidelity_turns.csv) and, on the short contexts, per layer the relative error of the K and
V rows each reader sees against its own full rows (fidelity_layers.csv).
Writes memory.csv, fidelity.csv, latency.csv, alora_reply.csv and their PNGs under --out. Run it with
nothing else on the machine: the timings are ratios measured in one run.

flags:
  --model FILE        GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --assets DIR        role adapters and held-out trajectories (default assets)
  --out DIR           where the CSVs and the PNG go (default bench_results/memory)
  --quick             the default: N in 1 2 4 8 16 at T = 512, fidelity on 4 short
                      contexts (both adapter sets) and 1 long one (the shared-A set),
                      decode on a 2048-token context (about 8 minutes on 2 cores)
  --full              the whole grid: T in 512 2048 8192, 12 short and 3 long fidelity
                      contexts for both sets, decode on 2048 and 4096 tokens (about an
                      hour on 2 cores)
  --parts LIST        comma-separated subset of memory,fidelity,latency,alora_reply
                      (default all)
  --lengths LIST      context lengths T of the memory grid, e.g. 512,2048 (overrides the grid's)
  --agents LIST       agent counts N of the memory grid, e.g. 1,8,16
  --decode-lengths LIST  context lengths of the 8-agent decode and the aLoRA reply, e.g.
                      2048,4096
  --fidelity-short N  short fidelity contexts, one held-out trajectory each (default 4,
                      --full 12)
  --fidelity-long N   long fidelity contexts, trajectories appended to about 2K tokens
                      (default 1, --full 3)
  --fidelity-sets LIST  adapter sets of the fidelity part (default
                      all_linear,qv_shared_a,alora_twins)
  --swap MODE:WRITER  the swap ablation for that mode (e.g. full_shared:base), on the short
                      contexts: before each role turn, the mode's rows of a band of layers
                      are replaced by the reader's own full rows and the turn runs again;
                      writes fidelity_swap.csv (each band's KL and the share of the mode's
                      KL it recovers; the last band is every layer, which recovers it all)
  --swap-band B       layers per band of the swap ablation (default 1)
  --repetitions N     timed repetitions per mode (default 3)
  --python FILE       Python with matplotlib for the PNG (default the checkout's
                      .venv-bench/bin/python, else .venv/bin/python, else python3)
)";

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "full_shared:base" -> the mode and writer of the swap ablation (a shared mode).
runtime::ContextOptions parse_swap_mode(const std::string& text) {
  const size_t colon = text.find(':');
  const std::optional<runtime::SharingMode> mode = runtime::parse_sharing_mode(text.substr(0, colon));
  const std::optional<runtime::SharedWriter> writer =
      colon == std::string::npos ? std::nullopt : runtime::parse_shared_writer(text.substr(colon + 1));
  if (!mode || !writer || *mode == runtime::SharingMode::kFull) {
    throw UsageError("bad mode", {"", "--swap", "a shared mode and its writer, e.g. full_shared:base", text, ""});
  }
  return {*mode, *writer};
}

// memory.png from memory.csv, latency.png from latency.csv (the script draws what it finds).
void plot(const MemoryBenchOptions& o, const std::string& png, std::ostream& out) {
  if (!o.python.empty()) draw_plot(o.python, "tools/plot_memory_bench.py", o.out_dir, png, out);
}

}  // namespace

const std::vector<BenchEntry>& benchmarks() {
  static const std::vector<BenchEntry> table = {
      {"memory", run_memory_bench},
      {"sessions", run_sessions_bench},
      {"requests", run_requests_bench},
      {"episodes", run_episodes_bench},
      {"eviction", run_eviction_bench},
      {"eviction-layout", run_eviction_layout_bench},
  };
  return table;
}

const char* bench_help() { return kBenchHelp; }

int run_bench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  (void)err;
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    out << kBenchHelp;
    return args.empty() ? kExitUsage : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  return find_named(benchmarks(), args[0], "benchmark", "run 'lorakv bench --help'").run(rest, out);
}

int run_memory_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args,
                  {"--model", "--assets", "--out", "--parts", "--repetitions", "--python", "--lengths", "--agents",
                   "--decode-lengths", "--fidelity-short", "--fidelity-long", "--fidelity-sets", "--swap", "--swap-band"},
                  {"--quick", "--full", "--help"}, "bench memory");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  if (a.has("--quick") && a.has("--full")) throw UsageError("--quick and --full exclude each other", {"", "--full", "", "", ""});
  MemoryBenchOptions o;
  o.model_path = a.get("--model").value_or(default_bench_model());
  o.assets_dir = a.get("--assets").value_or(default_bench_assets());
  o.out_dir = a.get("--out").value_or("bench_results/memory");
  o.python = a.get("--python").value_or(default_bench_python());
  o.full_grid = a.has("--full");
  o.repetitions = a.get_int("--repetitions", 3, 1, 100);
  o.agents = {1, 2, 4, 8, 16};
  o.lengths = o.full_grid ? std::vector<int64_t>{512, 2048, 8192} : std::vector<int64_t>{512};
  o.fidelity_trajectories = a.get_int("--fidelity-short", o.full_grid ? 12 : 4, 0, 360);
  o.fidelity_long = a.get_int("--fidelity-long", o.full_grid ? 3 : 1, 0, 100);
  if (const std::optional<std::string> sets = a.get("--fidelity-sets")) {
    o.fidelity_sets = split(*sets);
    for (const std::string& set : o.fidelity_sets) {
      if (set != "all_linear" && set != "qv_shared_a" && set != "alora_twins") {
        throw UsageError("unknown adapter set", {"", "--fidelity-sets", "all_linear, qv_shared_a or alora_twins", set, ""});
      }
    }
  }
  if (const std::optional<std::string> swap = a.get("--swap")) o.swap_mode = parse_swap_mode(*swap);
  o.swap_band = a.get_int("--swap-band", 1, 1, 1024);
  o.decode_lengths = o.full_grid ? std::vector<int64_t>{2048, 4096} : std::vector<int64_t>{2048};
  auto int_list = [&](const char* flag, std::vector<int64_t>& into, int64_t max) {
    const std::optional<std::string> text = a.get(flag);
    if (!text) return;
    into.clear();
    for (const std::string& item : split(*text)) {
      char* end = nullptr;
      const long long v = std::strtoll(item.c_str(), &end, 10);
      if (end == item.c_str() || *end != '\0' || v < 1 || v > max) {
        throw UsageError("bad list entry", {"", flag, "integers in 1.." + std::to_string(max) + ", comma-separated", item, ""});
      }
      into.push_back(v);
    }
    if (into.empty()) throw UsageError("empty list", {"", flag, "at least one integer", *text, ""});
  };
  int_list("--lengths", o.lengths, 1 << 20);
  int_list("--agents", o.agents, 64);
  int_list("--decode-lengths", o.decode_lengths, 1 << 20);
  const std::vector<std::string> parts = split(a.get("--parts").value_or("memory,fidelity,latency,alora_reply"));
  for (const std::string& p : parts) {
    if (p != "memory" && p != "fidelity" && p != "latency" && p != "alora_reply") {
      throw UsageError("unknown part", {"", "--parts", "memory, fidelity, latency or alora_reply", p, ""});
    }
  }
  std::filesystem::create_directories(o.out_dir);

  const cpu::CpuFeatures& f = cpu::detected_cpu_features();
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads, vector path "
      << cpu::vector_path_name(cpu::selected_vector_path()) << " (" << cpu::describe_features(f) << ")\n"
      << "device: CPU; model " << o.model_path << " (weights as stored, activations and cache float32); "
      << (o.full_grid ? "full grid" : "quick grid") << "\n";
  BenchWorkload w = load_workload(o, out);
  const runtime::ModelConfig& c = w.model().config();
  out << "sizes: " << c.num_layers << " layers, " << c.num_kv_heads << " KV heads of " << c.head_dim
      << ", cache blocks of 16 rows, rank-8 V residuals (qv_shared_a: A shared by every agent)\n";
  for (const std::string& p : parts) {
    if (p == "memory") run_memory_grid(w, o, out);
    if (p == "fidelity") run_fidelity(w, o, out);
    if (p == "latency") run_latency(w, o, out);
    if (p == "alora_reply") run_alora_reply(w, o, out);
  }
  for (const char* part : {"memory", "latency", "alora_reply"}) {
    if (std::find(parts.begin(), parts.end(), part) != parts.end()) plot(o, std::string(part) + ".png", out);
  }
  char line[96];
  std::snprintf(line, sizeof line, "wall time %.1f s\n", bench_seconds());
  out << line;
  return 0;
}

}  // namespace lorakv::cli
