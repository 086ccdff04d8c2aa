// cli/bench/bench_eviction.cpp: `lorakv bench eviction`: perplexity of real English prose
// under each eviction policy and budget against the full cache, with the KV bytes each
// holds; then retrieval of a fact hidden in the same prose (bench_eviction_retrieval.h);
// then the plot. The text is four license texts that ship with Debian's base-files package
// (/usr/share/common-licenses: GPL-3, GPL-2, LGPL-2.1, GFDL-1.3; about 21,000 tokens):
// prose every Debian machine has. Windows of --context tokens are processed in chunks with
// eviction between them (cli/perplexity_eval.h). Each row is appended to the CSV as it
// finishes, and a rerun skips the rows the CSV already holds, so a stopped run resumes.
#include <ATen/Parallel.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/cli/bench/bench_eviction_agents.h"
#include "lorakv/cli/bench/bench_eviction_kv_dtype.h"
#include "lorakv/cli/bench/bench_eviction_retrieval.h"
#include "lorakv/cli/bench/bench_eviction_streaming.h"
#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/perplexity_eval.h"
#include "lorakv/cli/perplexity_options.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {

namespace {

const char* kHelp = R"(usage: lorakv bench eviction [flags]

Three parts, each with the cache compressed by each policy at each budget, against the full
cache (policy none), with the KV bytes each holds; text: four license texts of Debian's
base-files package (/usr/share/common-licenses: GPL-3, GPL-2, LGPL-2.1, GFDL-1.3).
  perplexity: windows of --context tokens in chunks, eviction between them. Writes
    eviction_perplexity.csv: perplexity, KV bytes at the peak and after each step.
  retrieval: "The access code for <name> is <4 digits>." at a depth of a --haystack-token
    stretch of the same text; the haystack is processed in chunks with eviction between
    them before the question ("What is the access code for <name>?") comes. Writes
    eviction_retrieval.csv: exact-match success of greedy decoding of the code, mean
    teacher-forced log-probability of its tokens, KV bytes at the peak and after a step.
    Default grid: 6 cases per (policy, budget), 2 at each of depths 0.1, 0.5, 0.9;
    --full: 100 cases, 20 at each of depths 0.1, 0.3, 0.5, 0.7, 0.9.
  agents (not in the default): held-out agentic QA episodes appended into one trajectory of
    about --agents-context tokens, replayed teacher-forced by the three trained role adapters
    reading one base_lr_shared context (assets from --assets); the role turns' logits with the
    base compressed against the uncompressed replay (KL, top-1 agreement), the attention-
    scored policies scored by every agent's mass (sum, max) and by the writer alone. Writes
    eviction_agents.csv; about 1 minute a row.
  streaming (not in the default): memory over one long session: --stream-tokens of the text
    appended in chunks of --chunk to one base_shared context read by three agents, each
    decoding 8 tokens after every chunk, under --stream-policy at --stream-budget tokens,
    with pools sized in bytes for that budget. Prints and writes (eviction_streaming.csv)
    every 1,024 tokens the pools' bytes in use and at peak, the host metadata bytes and the
    process's resident memory. About 2 minutes for the model's 8,192 positions.
  kv_dtype (not in the default): the shared base stored as float32, bfloat16 and int8 (a
    float32 scale per token and KV head, rows Hadamard-rotated): per dtype, perplexity over
    --windows windows with the full cache (the three caches run side by side, chunk by chunk:
    mean KL and top-1 agreement of the logits against float32's) and with --kv-policy at 1/4,
    and retrieval with both (kv_dtype_<dtype>/eviction_retrieval.csv); then the composed
    figure: 8 agents (the qv_shared_a role adapters and synthetic ones with their A) on one
    4,096-token trajectory in base_lr_shared, with int8 and the 1/4 budget, against 8 full
    float32 caches. Writes eviction_kv_dtype.csv and eviction_composed.csv; about 5 minutes.
The default (every policy at budgets 1/2, 1/4, 1/8, and the full cache: 19 rows a part)
takes about 23 minutes on 2 cores: perplexity about 40 s a row, retrieval about 5 s a case
(30 s a row); --full's retrieval about 3 hours.
A row is appended to its CSV as each (policy, budget) finishes; a rerun resumes after the
rows already there (retrieval: rows of the same grid). At the end, eviction.png (quality
against KV bytes) is drawn with the bench environment's Python when .venv-bench exists
(bash tools/setup_python.sh bench), else the command is printed. Run it with nothing else
on the machine.

flags:
  --model FILE      GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --text FILE       the text (repeatable; default the four license texts)
  --parts LIST      comma-separated subset of perplexity,retrieval,agents,streaming,kv_dtype
                    (default perplexity,retrieval)
  --policies LIST   comma-separated (default every policy: streaming_llm,h2o,snapkv,
                    pyramidkv,adakv,leverage; adakv runs with a token set per KV head)
  --budgets LIST    shares of the window (or haystack) kept (default 0.5,0.25,0.125)
  --chunk N         tokens per engine step, evicted between (default 256)
  --windows N       perplexity: windows scored (default 3)
  --context N       perplexity: tokens per window (default 4096)
  --cases N         retrieval: cases per (policy, budget), spread over the depths in turn
                    (default 6; with --full 100)
  --depths LIST     retrieval: where the fact sits, fractions in [0, 1] of the haystack
                    (default 0.1,0.5,0.9; with --full 0.1,0.3,0.5,0.7,0.9)
  --haystack N      retrieval: filler tokens around the fact (default 2048)
  --seed N          retrieval: the facts' seed (default 1)
  --full            retrieval: the full grid (100 cases over 5 depths)
  --assets DIR      agents: role adapters and agentic QA data (default assets)
  --agents-context N  agents: trajectory tokens (default 2000)
  --agents-together   agents: every agent reads each role turn in that turn's step (sum and
                      max over agents then differ); writes eviction_agents_together.csv
  --stream-tokens N   streaming: tokens appended (default the model's context, 8192)
  --stream-budget N   streaming: tokens kept per lane (default 512)
  --stream-policy P   streaming: the policy (default streaming_llm)
  --stream-rerotate   streaming: keys rerotated (EngineOptions::rerotate): --stream-tokens may
                      pass the model's context (the text cycles); reader 0 scores every token
                      (perplexity per report window)
  --stream-report N   streaming: tokens between report lines (default 1024)
  --stream-decode N   streaming: after the stream, reader 0 decodes N tokens, timed against a
                      full cache of the kept tokens (blocks of 64, alternating)
The soak (not in make test): --parts streaming --stream-rerotate --stream-tokens 200000
  --stream-report 10000 --stream-decode 2048.
  --kv-policy P       kv_dtype: the policy at 1/4 beside the full cache (default snapkv)
  --out DIR         where the CSVs and the PNG go (default bench_results/eviction)
  --python FILE     Python with matplotlib for the PNG (default the checkout's
                    .venv-bench/bin/python, else .venv/bin/python, else python3)
)";

const std::vector<std::string> kDefaultTexts = {
    "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2", "/usr/share/common-licenses/LGPL-2.1",
    "/usr/share/common-licenses/GFDL-1.3"};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string read_texts(const std::vector<std::string>& paths) {
  std::string text;
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary);
    if (!in || std::filesystem::is_directory(p)) {
      throw ConfigError("cannot read the text", {p, "--text", "a readable text file", "", "on Debian: apt-get install base-files"});
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str() + "\n";
  }
  return text;
}

// The (policy, budget) rows a previous run finished.
std::set<std::string> finished_rows(const std::string& csv) {
  std::set<std::string> done;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const std::vector<std::string> f = split(line);
    if (f.size() > 2) done.insert(f[0] + "," + f[1]);
  }
  return done;
}

using Configs = std::vector<std::pair<std::string, cache::eviction::EvictionConfig>>;

// A budget of --budgets: a share in (0, 1].
double parse_budget(const std::string& text) {
  size_t used = 0;
  double share = -1;
  try {
    share = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(share > 0 && share <= 1)) {
    throw UsageError("a budget outside (0, 1]", {"", "--budgets", "shares of the context kept, e.g. 0.5,0.25", "'" + text + "'", ""});
  }
  return share;
}

// EvictionConfig::check's refusal with its key (".policy", ".budget"...) as the flag it came from.
void check_naming_flags(const cache::eviction::EvictionConfig& c) {
  try {
    c.check("");
  } catch (const ConfigError& e) {
    ErrorContext context = e.context();
    context.key = context.key == ".policy" ? "--policies" : context.key == ".budget" ? "--budgets" : context.key;
    throw UsageError(e.message(), context);
  }
}

// "streaming_llm,h2o,...": every policy the cache has, none aside.
std::string every_policy() {
  std::string all;
  for (const std::string& p : cache::eviction::policy_names()) {
    if (p != "none") all += (all.empty() ? "" : ",") + p;
  }
  return all;
}

// The full cache ("-") first, then every policy at every budget.
Configs eviction_configs(const CliArgs& a) {
  const std::vector<std::string> policies = split(a.get("--policies").value_or(every_policy()));
  const std::vector<std::string> budgets = split(a.get("--budgets").value_or("0.5,0.25,0.125"));
  Configs configs = {{"-", {}}};
  for (const std::string& p : policies) {
    for (const std::string& b : budgets) {
      cache::eviction::EvictionConfig c;
      c.policy = p;
      c.budget_fraction = parse_budget(b);
      check_naming_flags(c);
      configs.emplace_back(b, c);
    }
  }
  return configs;
}

std::set<std::string> parse_parts(const CliArgs& a) {
  std::set<std::string> parts;
  for (const std::string& p : split(a.get("--parts").value_or("perplexity,retrieval"))) {
    if (p != "perplexity" && p != "retrieval" && p != "agents" && p != "streaming" && p != "kv_dtype") {
      throw UsageError("unknown part",
                        {"", "--parts", "perplexity, retrieval, agents, streaming or kv_dtype, comma-separated", p, ""});
    }
    parts.insert(p);
  }
  if (parts.empty()) throw UsageError("no parts", {"", "--parts", "perplexity, retrieval or agents, comma-separated", "", ""});
  return parts;
}

void run_perplexity_part(const runtime::LlamaModel& model, const std::vector<int32_t>& tokens, const Configs& configs,
                         const PerplexitySettings& base, int64_t context, const std::string& dir, std::ostream& out) {
  const int64_t chunk = base.chunk;
  out << "perplexity: " << base.windows.size() << " windows of " << context << " tokens, chunks of " << chunk << "\n";
  std::filesystem::create_directories(dir);
  const std::string csv_path = dir + "/eviction_perplexity.csv";
  const std::set<std::string> done = finished_rows(csv_path);
  const bool fresh = done.empty();
  std::ofstream csv(csv_path, std::ios::app);
  if (fresh) {
    csv << "policy,budget,windows,context,chunk,tokens_scored,ppl,nll_mean,kv_bytes_peak,kv_bytes_after_step,"
           "rows_evicted,seconds,evict_seconds,kernel_seconds\n";
  }
  char line[256];
  for (const auto& [budget, config] : configs) {
    const std::string policy = config.enabled() ? config.policy : "none";
    if (done.count(policy + "," + budget)) {
      out << policy << " " << budget << ": in the CSV already\n";
      continue;
    }
    PerplexitySettings s = base;
    s.eviction = config;
    s.per_head_token_sets = needs_per_head_lanes(config);
    const PerplexityTotals t = score_perplexity(model, tokens, s);
    csv << policy << "," << budget << "," << t.windows << "," << context << "," << chunk << "," << t.tokens_scored << ","
        << t.ppl() << "," << t.nll_mean() << "," << t.kv_bytes_high_water << "," << t.kv_bytes_peak << ","
        << t.rows_evicted << "," << t.seconds << "," << t.evict_seconds << "," << t.kernel_seconds << "\n";
    csv.flush();
    std::snprintf(line, sizeof line, "%-14s budget %-6s ppl %8.4f  KV peak %7.2f MiB (after a step %7.2f MiB)  %6.1f s\n",
                  policy.c_str(), budget.c_str(), t.ppl(), static_cast<double>(t.kv_bytes_high_water) / (1 << 20),
                  static_cast<double>(t.kv_bytes_peak) / (1 << 20), t.seconds);
    out << line << std::flush;
  }
  out << "wrote " << csv_path << "\n";
}

std::set<std::string> bench_value_flags() {
  std::set<std::string> flags = {"--model", "--text",  "--windows", "--context", "--chunk",
                                 "--policies", "--budgets", "--out", "--parts", "--python",
                                 "--assets", "--agents-context", "--stream-tokens", "--stream-budget",
                                 "--stream-policy", "--kv-policy", "--stream-report", "--stream-decode"};
  flags.insert(retrieval_value_flags().begin(), retrieval_value_flags().end());
  return flags;
}

std::set<std::string> bench_bool_flags() {
  std::set<std::string> flags = {"--help", "--agents-together", "--stream-rerotate"};
  flags.insert(retrieval_bool_flags().begin(), retrieval_bool_flags().end());
  return flags;
}

}  // namespace

int run_eviction_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, bench_value_flags(), bench_bool_flags(), "bench eviction");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  const std::string model_path = a.get("--model").value_or(default_bench_model());
  const std::vector<std::string> texts = a.get_all("--text").empty() ? kDefaultTexts : a.get_all("--text");
  const int64_t num_windows = a.get_int("--windows", 3, 1, 1000);
  const int64_t context = a.get_int("--context", 4096, 16, 1 << 20);
  const int64_t chunk = a.get_int("--chunk", 256, 1, 1 << 20);
  const std::string dir = a.get("--out").value_or("bench_results/eviction");
  const std::string python = a.get("--python").value_or(default_bench_python());
  const Configs configs = eviction_configs(a);
  const std::set<std::string> parts = parse_parts(a);
  const RetrievalGrid grid = parse_retrieval_grid(a);
  const std::string text = read_texts(texts);
  const runtime::LoadedModel loaded = runtime::load_model(model_path, at::kFloat, runtime::WeightForm::kNative);
  LORAKV_CHECK(loaded.tokenizer != nullptr, ConfigError, "the model has no tokenizer");
  const std::vector<int32_t> tokens = loaded.tokenizer->encode(text, /*parse_special=*/false);
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads, vector path "
      << cpu::vector_path_name(cpu::selected_vector_path()) << "\n"
      << "device: CPU, float32 activations and cache; model " << model_path << " (weights as stored)\n"
      << "text: " << tokens.size() << " tokens\n";
  if (parts.count("perplexity")) {
    PerplexitySettings base;
    base.windows = plan_windows(static_cast<int64_t>(tokens.size()), context, chunk);
    if (static_cast<int64_t>(base.windows.size()) > num_windows) base.windows.resize(static_cast<size_t>(num_windows));
    base.chunk = chunk;
    run_perplexity_part(*loaded.model, tokens, configs, base, context, dir, out);
  }
  if (parts.count("retrieval")) {
    run_retrieval_part(*loaded.model, *loaded.tokenizer, tokens, configs, grid, chunk, dir, out);
  }
  if (parts.count("agents")) {
    EvictionAgentsOptions agents;
    agents.model_path = model_path;
    agents.assets_dir = a.get("--assets").value_or(default_bench_assets());
    agents.out_dir = dir;
    agents.context_tokens = a.get_int("--agents-context", 2000, 64, 1 << 20);
    agents.every_agent_reads = a.has("--agents-together");
    if (a.get("--policies")) agents.policies = split(*a.get("--policies"));
    if (a.get("--budgets")) {
      agents.budgets.clear();
      for (const std::string& b : split(*a.get("--budgets"))) agents.budgets.push_back(parse_budget(b));
    }
    run_eviction_agents(agents, out);
  }
  if (parts.count("kv_dtype")) {
    KvDtypeBenchOptions k;
    k.model_path = model_path;
    k.assets_dir = a.get("--assets").value_or(default_bench_assets());
    k.out_dir = dir;
    k.windows = plan_windows(static_cast<int64_t>(tokens.size()), context, chunk);
    if (static_cast<int64_t>(k.windows.size()) > num_windows) k.windows.resize(static_cast<size_t>(num_windows));
    k.chunk = chunk;
    k.retrieval = grid;
    k.policy = a.get("--kv-policy").value_or(k.policy);
    run_kv_dtype_part(*loaded.model, *loaded.tokenizer, tokens, k, out);
  }
  if (parts.count("streaming")) {
    EvictionStreamingOptions s;
    s.total_tokens = a.get_int("--stream-tokens", 0, 0, 1 << 24);
    s.budget = a.get_int("--stream-budget", s.budget, 16, 1 << 20);
    s.policy = a.get("--stream-policy").value_or(s.policy);
    s.rerotate = a.has("--stream-rerotate");
    s.report_every = a.get_int("--stream-report", s.report_every, 1, 1 << 24);
    s.final_decode = a.get_int("--stream-decode", 0, 0, 1 << 20);
    s.chunk = chunk;
    run_eviction_streaming(*loaded.model, tokens, s, dir, out);
  }
  plot_eviction(python, dir, out);
  return 0;
}

}  // namespace lorakv::cli
