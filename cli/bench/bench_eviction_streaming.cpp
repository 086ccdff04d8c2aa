// cli/bench/bench_eviction_streaming.cpp: the streaming part of `lorakv bench eviction`
// (bench_eviction_streaming.h).
#include "lorakv/cli/bench/bench_eviction_streaming.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::cli {

int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    int64_t kib = 0;
    in >> kib;
    return kib * 1024;
  }
  return 0;
}

namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Rows per lane the pools must hold: the budget, one chunk above it before eviction, and
// every agent's private rows (one block of slack each for partly filled blocks).
int64_t pool_rows(const EvictionStreamingOptions& o, int64_t block_size) {
  return o.budget + o.chunk + o.readers * (o.decode_tokens + block_size) + 2 * block_size;
}

// Token i of the streamed text: the text over and over.
int32_t token_at(const std::vector<int32_t>& text, int64_t i) { return text[static_cast<size_t>(i % static_cast<int64_t>(text.size()))]; }

std::vector<int32_t> tokens_between(const std::vector<int32_t>& text, int64_t begin, int64_t end) {
  std::vector<int32_t> out;
  for (int64_t i = begin; i < end; ++i) out.push_back(token_at(text, i));
  return out;
}

// Reader 0 processes what is pending in chunks with every logit (teacher-forced, eviction
// between chunks), adding -log p of each next token (the text is known past the chunk) to
// `nll`, counted in `scored`.
void prefill_scored(runtime::Engine& engine, runtime::ContextId ctx, const std::vector<int32_t>& text, double& nll,
                    int64_t& scored) {
  std::vector<runtime::DriverJob> jobs(1);
  jobs[0].reader = {ctx, 0};
  jobs[0].all_logits = true;
  jobs[0].on_output = [&](const runtime::StepOutput& o) {
    const std::vector<int32_t> next = tokens_between(text, o.first_position + 1, o.first_position + 1 + o.tokens_processed);
    const at::Tensor targets = at::tensor(std::vector<int64_t>(next.begin(), next.end()), at::kLong).unsqueeze(1);  // [n, 1]
    nll -= o.logits.log_softmax(-1).gather(1, targets).to(at::kDouble).sum().item<double>();
    scored += o.tokens_processed;
  };
  runtime::Driver(engine).run(jobs);
}

// Every reader in `readers` decodes `n` tokens of `text` from `from`, one step a token for
// all of them, teacher-forced.
void forced_decode(runtime::Engine& engine, runtime::ContextId ctx, int32_t readers, const std::vector<int32_t>& text,
                   int64_t from, int64_t n) {
  if (n <= 0) return;
  std::vector<runtime::DriverJob> jobs;
  for (int32_t r = 0; r < readers; ++r) jobs.push_back(runtime::forced_decode_job({ctx, r}, tokens_between(text, from, from + n)));
  runtime::Driver(engine).run(jobs);
}

// Seconds per decoded token of reader 0 on `engine`'s context, `n` teacher-forced tokens.
double decode_seconds(runtime::Engine& engine, runtime::ContextId ctx, const std::vector<int32_t>& text, int64_t from, int64_t n) {
  const auto start = std::chrono::steady_clock::now();
  forced_decode(engine, ctx, 1, text, from, n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / static_cast<double>(n);
}

runtime::ContextOptions context_options(const EvictionStreamingOptions& o) {
  runtime::ContextOptions c{runtime::SharingMode::kBaseShared, runtime::SharedWriter::kFirst};
  c.eviction.policy = o.policy;
  c.eviction.budget_tokens = o.budget;
  return c;
}

// Every agent decodes `o.decode_tokens` tokens of `text` from `from`, one step per token,
// then drops them.
void decode_and_drop(runtime::Engine& engine, runtime::ContextId ctx, const std::vector<int32_t>& text, int64_t from,
                     const EvictionStreamingOptions& o) {
  forced_decode(engine, ctx, static_cast<int32_t>(o.readers), text, from, o.decode_tokens);
  for (int32_t r = 0; r < o.readers; ++r) engine.drop_private({ctx, r});
}

// Reader 0 decodes o.final_decode tokens after the stream, against a full cache (no eviction)
// holding as many tokens as the stream keeps: blocks of 64 tokens, the sides alternating.
void compare_decode(const runtime::LlamaModel& model, runtime::Engine& streamed, runtime::ContextId ctx,
                    const std::vector<int32_t>& text, int64_t total, const EvictionStreamingOptions& o, std::ostream& out) {
  const auto kept = static_cast<int64_t>(streamed.kept_positions(ctx).front().size());
  runtime::EngineOptions eo;
  eo.prefill_chunk = o.chunk;
  eo.base_rows = kept + o.final_decode + 64;
  runtime::Engine full(model, eo);
  const runtime::ContextId fctx = full.create_context({runtime::SharingMode::kFull, runtime::SharedWriter::kFirst}, {nullptr});
  full.append(fctx, tokens_between(text, total - kept, total));
  runtime::prefill(full, {fctx, 0});
  double streamed_s = 0, full_s = 0;
  int64_t blocks = 0;
  for (int64_t t = 0; t + 64 <= o.final_decode; t += 64, ++blocks) {
    const bool streamed_first = blocks % 2 == 0;
    const double a = streamed_first ? decode_seconds(streamed, ctx, text, total + t, 64) : 0;
    full_s += decode_seconds(full, fctx, text, total + t, 64);
    streamed_s += streamed_first ? a : decode_seconds(streamed, ctx, text, total + t, 64);
  }
  char line[240];
  std::snprintf(line, sizeof line,
                "decode after the stream: %lld tokens, %.2f ms a token; a full cache of the %lld kept tokens: %.2f ms "
                "(streamed / full %.3f, blocks of 64 alternating)\n",
                static_cast<long long>(blocks * 64), 1e3 * streamed_s / static_cast<double>(blocks),
                static_cast<long long>(kept), 1e3 * full_s / static_cast<double>(blocks), streamed_s / full_s);
  out << line;
}

}  // namespace

void run_eviction_streaming(const runtime::LlamaModel& model, const std::vector<int32_t>& tokens,
                            const EvictionStreamingOptions& o, const std::string& dir, std::ostream& out) {
  runtime::EngineOptions eo;
  eo.rerotate = o.rerotate;
  eo.prefill_chunk = o.chunk;
  eo.kv_pool_bytes = (pool_rows(o, eo.block_size) + o.final_decode) * runtime::Engine::base_row_bytes(model, eo);
  runtime::Engine engine(model, eo);
  // Without rerotate the session stops at the model's context and the text's end.
  const int64_t total = o.rerotate && o.total_tokens > 0
                            ? o.total_tokens
                            : std::min({o.total_tokens > 0 ? o.total_tokens : engine.max_context_tokens(),
                                        engine.max_context_tokens() - o.decode_tokens,
                                        static_cast<int64_t>(tokens.size()) - o.decode_tokens});
  const runtime::ContextId ctx =
      engine.create_context(context_options(o), std::vector<std::shared_ptr<const adapters::Adapter>>(static_cast<size_t>(o.readers)));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/eviction_streaming.csv";
  std::ofstream csv(path);
  csv << "policy,budget,chunk,readers,decode_tokens,rerotate,tokens,kv_bytes_in_use,kv_bytes_peak,pool_reserved_bytes,"
         "host_metadata_bytes,trajectory_bytes,resident_bytes,window_ppl,seconds\n";
  char line[320];
  std::snprintf(line, sizeof line,
                "\nstreaming: %lld tokens in chunks of %lld into one base_shared context read by %lld agents, each "
                "decoding %lld tokens after every chunk; %s at %lld tokens; pools sized for %lld rows (%.1f MiB)\n",
                static_cast<long long>(total), static_cast<long long>(o.chunk), static_cast<long long>(o.readers),
                static_cast<long long>(o.decode_tokens), o.policy.c_str(), static_cast<long long>(o.budget),
                static_cast<long long>(pool_rows(o, eo.block_size)), mib(eo.kv_pool_bytes));
  out << line
      << (o.rerotate ? "keys rerotated to their index among the rows kept; the text cycles when it ends\n" : "")
      << "| tokens | KV in use MiB | KV peak MiB | pools reserved MiB | host metadata KiB | trajectory KiB | resident MiB | window ppl | s |\n"
      << "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  double nll = 0;
  int64_t scored = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t pos = 0; pos + o.chunk <= total; pos += o.chunk) {
    engine.append(ctx, tokens_between(tokens, pos, pos + o.chunk));
    prefill_scored(engine, ctx, tokens, nll, scored);
    for (int32_t r = 1; r < o.readers; ++r) runtime::prefill(engine, {ctx, r});
    decode_and_drop(engine, ctx, tokens, pos + o.chunk, o);
    const int64_t done = pos + o.chunk;
    const bool crossed = done / o.report_every != (done - o.chunk) / o.report_every;  // a report line per report_every tokens
    if (!crossed && done + o.chunk <= total) continue;
    const runtime::EngineMemory memory = engine.memory();
    const cache::CacheStats& s = memory.cache;
    const int64_t rss = resident_bytes();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double window_ppl = scored > 0 ? std::exp(nll / static_cast<double>(scored)) : 0.0;
    nll = 0;
    scored = 0;
    csv << o.policy << "," << o.budget << "," << o.chunk << "," << o.readers << "," << o.decode_tokens << "," << o.rerotate << ","
        << done << "," << s.bytes_in_use << "," << s.peak_bytes_in_use << "," << s.reserved_bytes << "," << s.metadata_bytes << ","
        << memory.trajectory_bytes << "," << rss << "," << window_ppl << "," << seconds << "\n";
    csv.flush();
    std::snprintf(line, sizeof line, "| %lld | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.3f | %.1f |\n",
                  static_cast<long long>(done), mib(s.bytes_in_use), mib(s.peak_bytes_in_use), mib(s.reserved_bytes),
                  static_cast<double>(s.metadata_bytes) / 1024, static_cast<double>(memory.trajectory_bytes) / 1024,
                  mib(rss), window_ppl, seconds);
    out << line << std::flush;
  }
  out << "wrote " << path << "\n";
  if (o.final_decode > 0) compare_decode(model, engine, ctx, tokens, total, o, out);
}

}  // namespace lorakv::cli
