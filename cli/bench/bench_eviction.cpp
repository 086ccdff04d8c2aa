// cli/bench/bench_eviction.cpp: `lorakv bench eviction`: perplexity of real English prose
// under each eviction policy and budget against the full cache, with the KV bytes each
// holds. The text is four license texts that ship with Debian's base-files package
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

Perplexity of real English prose (four license texts of Debian's base-files package) with
the cache compressed by each policy at each budget, against the full cache; KV bytes at the
peak and after each step. Writes eviction_perplexity.csv under --out, a row as each
(policy, budget) finishes; a rerun resumes after the rows already there. Run it with nothing
else on the machine.

flags:
  --model FILE      GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --text FILE       the text (repeatable; default the four license texts)
  --windows N       windows scored (default 5)
  --context N       tokens per window (default 4096)
  --chunk N         tokens per engine step, evicted between (default 256)
  --policies LIST   comma-separated (default streaming_llm,h2o)
  --budgets LIST    shares of the window kept (default 0.5,0.25,0.125)
  --out DIR         where the CSV goes (default bench_results/eviction)
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

struct Row {
  std::string policy, budget;
  PerplexityTotals totals;
};

}  // namespace

int run_eviction_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, {"--model", "--text", "--windows", "--context", "--chunk", "--policies", "--budgets", "--out"},
                  {"--help"}, "bench eviction");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  const std::string model_path = a.get("--model").value_or("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  const std::vector<std::string> texts = a.get_all("--text").empty() ? kDefaultTexts : a.get_all("--text");
  const int64_t num_windows = a.get_int("--windows", 5, 1, 1000);
  const int64_t context = a.get_int("--context", 4096, 16, 1 << 20);
  const int64_t chunk = a.get_int("--chunk", 256, 1, 1 << 20);
  const std::vector<std::string> policies = split(a.get("--policies").value_or("streaming_llm,h2o"));
  const std::vector<std::string> budgets = split(a.get("--budgets").value_or("0.5,0.25,0.125"));
  const std::string dir = a.get("--out").value_or("bench_results/eviction");
  std::vector<std::pair<std::string, cache::eviction::EvictionConfig>> configs = {{"-", {}}};
  for (const std::string& p : policies) {
    for (const std::string& b : budgets) {
      cache::eviction::EvictionConfig c;
      c.policy = p;
      c.budget_fraction = std::stod(b);
      c.check("--policies/--budgets");
      configs.emplace_back(b, c);
    }
  }
  const std::string text = read_texts(texts);
  const runtime::LoadedModel loaded = runtime::load_model(model_path, at::kFloat, runtime::WeightForm::kNative);
  LORAKV_CHECK(loaded.tokenizer != nullptr, ConfigError, "the model has no tokenizer");
  const std::vector<int32_t> tokens = loaded.tokenizer->encode(text, /*parse_special=*/false);
  PerplexitySettings base;
  base.windows = plan_windows(static_cast<int64_t>(tokens.size()), context, chunk);
  if (static_cast<int64_t>(base.windows.size()) > num_windows) base.windows.resize(static_cast<size_t>(num_windows));
  base.chunk = chunk;
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads, vector path "
      << cpu::vector_path_name(cpu::selected_vector_path()) << "\n"
      << "device: CPU, float32 activations and cache; model " << model_path << " (weights as stored)\n"
      << "text: " << tokens.size() << " tokens; " << base.windows.size() << " windows of " << context
      << " tokens, chunks of " << chunk << "\n";
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
    const PerplexityTotals t = score_perplexity(*loaded.model, tokens, s);
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
  return 0;
}

}  // namespace lorakv::cli
