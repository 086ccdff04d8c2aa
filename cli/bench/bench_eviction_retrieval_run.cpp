// cli/bench/bench_eviction_retrieval_run.cpp: the retrieval part on the engine: the cases
// built from the text, one case as engine steps (haystack in chunks with eviction between
// them, then the question and answer as private rows), a row per (policy, budget), the plot.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/bench/bench_eviction_retrieval.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/common/subprocess.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::cli {
namespace {

struct RetrievalCase {
  RetrievalFact fact;
  double depth = 0;
  int64_t position = 0;            // of the fact's first token in the haystack
  std::vector<int32_t> haystack;   // filler with the fact inside
  std::vector<int32_t> question;   // after the haystack, ending with the answer's prefix
  std::vector<int32_t> answer;
};

// starts[i]: token i of `text` begins a line (the token before it ends with a newline).
std::vector<bool> line_starts(const formats::BpeTokenizer& tokenizer, const std::vector<int32_t>& text) {
  std::vector<bool> starts(text.size(), false);
  for (size_t i = 0; i < text.size(); ++i) {
    const std::string& before = i == 0 ? std::string("\n") : tokenizer.token_piece(text[i - 1]);
    starts[i] = !before.empty() && before.back() == '\n';
  }
  return starts;
}

// The first token of filler window w: spread evenly over the text, moved back to a line start.
int64_t window_start(const std::vector<bool>& starts, int64_t w, int64_t windows, int64_t haystack) {
  const auto room = static_cast<int64_t>(starts.size()) - haystack;
  int64_t s = windows > 1 ? w * room / (windows - 1) : 0;
  while (s > 0 && !starts[static_cast<size_t>(s)]) --s;
  return s;
}

// The answer's tokens as they follow the question: encoded together, so that a merge across
// the boundary (there should be none after "is") cannot make the answer a different string.
std::vector<int32_t> answer_tokens(const formats::BpeTokenizer& tokenizer, const RetrievalTexts& t,
                                   const std::vector<int32_t>& question) {
  const std::vector<int32_t> both = tokenizer.encode(t.question + t.answer, /*parse_special=*/false);
  if (both.size() > question.size() && std::equal(question.begin(), question.end(), both.begin())) {
    return std::vector<int32_t>(both.begin() + static_cast<int64_t>(question.size()), both.end());
  }
  return tokenizer.encode(t.answer, /*parse_special=*/false);
}

std::vector<RetrievalCase> build_cases(const formats::BpeTokenizer& tokenizer, const std::vector<int32_t>& text,
                                       const RetrievalGrid& grid) {
  const int64_t h = grid.haystack_tokens;
  if (static_cast<int64_t>(text.size()) < h) {
    throw ConfigError("the text is shorter than one haystack",
                      {"", "--haystack", "at most the text's " + std::to_string(text.size()) + " tokens",
                       std::to_string(h), "a smaller --haystack, or more --text"});
  }
  const std::vector<bool> starts = line_starts(tokenizer, text);
  std::vector<RetrievalCase> cases;
  for (int64_t c = 0; c < grid.cases; ++c) {
    RetrievalCase k;
    k.fact = make_fact(grid.seed, c);
    k.depth = grid.depth_of(c);
    const RetrievalTexts t = retrieval_texts(k.fact);
    const int64_t begin = window_start(starts, c / static_cast<int64_t>(grid.depths.size()), grid.windows(), h);
    const std::vector<int32_t> filler(text.begin() + begin, text.begin() + begin + h);
    k.position = fact_position(std::vector<bool>(starts.begin() + begin, starts.begin() + begin + h), k.depth);
    k.haystack = insert_fact(filler, tokenizer.encode(t.fact, /*parse_special=*/false), k.position);
    k.question = tokenizer.encode(t.question, /*parse_special=*/false);
    k.answer = answer_tokens(tokenizer, t, k.question);
    cases.push_back(std::move(k));
  }
  return cases;
}

// Pools for one case at a time: its haystack, question and answer, and a chunk and a block
// more so that a step before eviction always fits. Per-head lanes where the policy needs them.
runtime::EngineOptions engine_options(const std::vector<RetrievalCase>& cases, int64_t chunk, bool per_head_lanes,
                                      std::optional<cache::StorageDtype> kv_dtype) {
  runtime::EngineOptions o;
  o.kv_dtype = kv_dtype;
  int64_t longest = 0;
  for (const RetrievalCase& k : cases) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(k.haystack.size() + k.question.size() + k.answer.size()));
  }
  const int64_t rows = longest + chunk + o.block_size;
  o.base_rows = (rows + o.block_size - 1) / o.block_size * o.block_size;
  o.prefill_chunk = chunk;
  o.per_head_token_sets = per_head_lanes;
  return o;
}

struct CaseOutcome {
  bool success = false;
  double answer_logprob = 0;  // nats, summed over the answer's tokens
};

// Runs the jobs through the driver (eviction after every step), tracking the KV bytes after
// each step; a step the pools cannot hold is a CapacityError naming the flags to change.
void run_jobs(runtime::Engine& engine, std::vector<runtime::DriverJob>& jobs, int64_t& kv_after_step) {
  const runtime::StepHook track = [&](runtime::Engine& e, const runtime::StepResult&) {
    kv_after_step = std::max(kv_after_step, e.memory().cache.bytes_in_use);
  };
  try {
    runtime::Driver(engine, track).run(jobs);
  } catch (const runtime::CapacityError& e) {
    throw runtime::CapacityError("a retrieval step did not fit the KV pools: " + e.message(),
                                 {"", "--haystack", std::to_string(engine.options().base_rows) + " rows per lane", "",
                                  "a smaller --haystack or --chunk"});
  }
}

// Sum of log p(answer[j] | everything before it), from the private step's logits over
// question + answer (float32 [q + a, vocab]): row q - 1 + j predicts answer[j].
double answer_logprob(const at::Tensor& logits, int64_t question_tokens, const std::vector<int32_t>& answer) {
  const auto a = static_cast<int64_t>(answer.size());
  const at::Tensor rows = logits.narrow(0, question_tokens - 1, a);                     // float32 [a, vocab]
  const at::Tensor targets = at::tensor(std::vector<int64_t>(answer.begin(), answer.end()), at::kLong).unsqueeze(1);  // int64 [a, 1]
  return at::log_softmax(rows, /*dim=*/1).gather(1, targets).to(at::kDouble).sum().item<double>();
}

CaseOutcome run_case(runtime::Engine& engine, const RetrievalCase& k, const cache::eviction::EvictionConfig& eviction,
                     int64_t chunk, int64_t& kv_after_step) {
  runtime::ContextOptions options;
  options.mode = runtime::SharingMode::kFull;
  options.eviction = eviction;
  const runtime::ContextId ctx = engine.create_context(options, {nullptr});
  const runtime::ReaderRef reader{ctx, 0};
  engine.append(ctx, k.haystack);
  std::vector<runtime::DriverJob> jobs(1);
  jobs[0].reader = reader;
  jobs[0].max_chunk = chunk;
  run_jobs(engine, jobs, kv_after_step);  // the haystack, evicted after each chunk
  CaseOutcome o;
  // Teacher-forced: the question and the answer as private tokens, every row's logits.
  jobs[0] = runtime::DriverJob{};
  jobs[0].reader = reader;
  jobs[0].suffix = k.question;
  jobs[0].suffix.insert(jobs[0].suffix.end(), k.answer.begin(), k.answer.end());
  jobs[0].all_logits = true;
  jobs[0].on_output = [&](const runtime::StepOutput& out) {
    o.answer_logprob = answer_logprob(out.logits, static_cast<int64_t>(k.question.size()), k.answer);
  };
  run_jobs(engine, jobs, kv_after_step);
  engine.drop_private(reader);
  // Greedy decoding of as many tokens as the answer has, stopping at the first miss.
  o.success = true;
  size_t decoded = 0;
  jobs[0] = runtime::DriverJob{};
  jobs[0].reader = reader;
  jobs[0].suffix = k.question;
  jobs[0].next = [&](const at::Tensor& logits) -> std::optional<int32_t> {  // float32 [vocab]
    if (decoded == k.answer.size()) return std::nullopt;
    const auto token = static_cast<int32_t>(logits.argmax().item<int64_t>());
    if (token != k.answer[decoded++]) {
      o.success = false;
      return std::nullopt;
    }
    return decoded < k.answer.size() ? std::optional<int32_t>(token) : std::nullopt;
  };
  run_jobs(engine, jobs, kv_after_step);
  engine.release_context(ctx);
  return o;
}

struct RowTotals {
  int64_t successes = 0;
  double logprob_sum = 0;
  int64_t kv_bytes_peak = 0, kv_bytes_after_step = 0;
  std::map<double, std::pair<int64_t, int64_t>> by_depth;  // depth -> (successes, cases)
  double seconds = 0;
};

RowTotals run_row(const runtime::LlamaModel& model, const std::vector<RetrievalCase>& cases,
                  const cache::eviction::EvictionConfig& eviction, int64_t chunk, std::optional<cache::StorageDtype> kv_dtype) {
  const log::Stopwatch watch;
  // Fresh pools: the peak is this row's.
  runtime::Engine engine(model, engine_options(cases, chunk, needs_per_head_lanes(eviction), kv_dtype));
  RowTotals t;
  for (const RetrievalCase& k : cases) {
    const CaseOutcome o = run_case(engine, k, eviction, chunk, t.kv_bytes_after_step);
    t.successes += o.success ? 1 : 0;
    t.logprob_sum += o.answer_logprob;
    auto& [hits, count] = t.by_depth[k.depth];
    hits += o.success ? 1 : 0;
    ++count;
  }
  t.kv_bytes_peak = engine.memory().cache.peak_bytes_in_use;
  t.seconds = watch.seconds();
  return t;
}

std::string by_depth_text(const RowTotals& t, const char* sep) {
  std::string out;
  char buf[48];
  for (const auto& [depth, hits_count] : t.by_depth) {
    std::snprintf(buf, sizeof buf, "%g:%.2f", depth,
                  static_cast<double>(hits_count.first) / static_cast<double>(hits_count.second));
    out += (out.empty() ? "" : sep) + std::string(buf);
  }
  return out;
}

void print_grid(const RetrievalGrid& grid, const std::vector<RetrievalCase>& cases, int64_t chunk,
                const formats::BpeTokenizer& tokenizer, std::ostream& out) {
  const RetrievalTexts t = retrieval_texts(cases.front().fact);
  out << "retrieval: " << grid.cases << " cases per (policy, budget) at depths " << grid.depths_text() << ", "
      << grid.windows() << " haystacks of " << grid.haystack_tokens
      << " tokens of the license texts (Debian base-files), chunks of " << chunk << "; seed " << grid.seed
      << "\n  fact (at a line start): " << t.fact << "  question, after the haystack is compressed:"
      << t.question << "\n  answer: '" << t.answer << "' (" << cases.front().answer.size() << " tokens: "
      << tokenizer.decode(cases.front().answer) << "), exact match of greedy decoding\n";
}

}  // namespace

void run_retrieval_part(const runtime::LlamaModel& model, const formats::BpeTokenizer& tokenizer,
                        const std::vector<int32_t>& text,
                        const std::vector<std::pair<std::string, cache::eviction::EvictionConfig>>& configs,
                        const RetrievalGrid& grid, int64_t chunk, const std::string& dir, std::ostream& out) {
  const std::vector<RetrievalCase> cases = build_cases(tokenizer, text, grid);
  print_grid(grid, cases, chunk, tokenizer, out);
  std::filesystem::create_directories(dir);
  const std::string csv_path = dir + "/eviction_retrieval.csv";
  const std::set<std::string> done = finished_retrieval_rows(csv_path);
  const bool fresh = !std::filesystem::exists(csv_path) || std::filesystem::file_size(csv_path) == 0;
  std::ofstream csv(csv_path, std::ios::app);
  if (fresh) csv << retrieval_csv_header() << "\n";
  char line[320];
  for (const auto& [budget, config] : configs) {
    const std::string policy = config.enabled() ? config.policy : "none";
    const std::string key = retrieval_row_key(policy, budget, grid);
    if (done.count(key)) {
      out << "retrieval " << policy << " " << budget << ": in the CSV already\n";
      continue;
    }
    const RowTotals t = run_row(model, cases, config, chunk, grid.kv_dtype);
    const double n = static_cast<double>(grid.cases);
    csv << key << "," << t.successes << "," << static_cast<double>(t.successes) / n << "," << t.logprob_sum / n << ","
        << t.kv_bytes_peak << "," << t.kv_bytes_after_step << "," << by_depth_text(t, ";") << "," << t.seconds << "\n";
    csv.flush();
    std::snprintf(line, sizeof line,
                  "retrieval %-14s budget %-6s success %3lld/%-3lld  answer log-prob %8.3f  KV peak %7.2f MiB (after a "
                  "step %7.2f MiB)  by depth %s  %6.1f s (%.2f s a case)\n",
                  policy.c_str(), budget.c_str(), static_cast<long long>(t.successes),
                  static_cast<long long>(grid.cases), t.logprob_sum / n,
                  static_cast<double>(t.kv_bytes_peak) / (1 << 20),
                  static_cast<double>(t.kv_bytes_after_step) / (1 << 20), by_depth_text(t, " ").c_str(), t.seconds,
                  t.seconds / n);
    out << line << std::flush;
  }
  out << "wrote " << csv_path << "\n";
}

void plot_eviction(const std::string& python, const std::string& dir, std::ostream& out) {
  draw_plot(python, "tools/plot_eviction.py", dir, "eviction.png", out);
}

}  // namespace lorakv::cli
