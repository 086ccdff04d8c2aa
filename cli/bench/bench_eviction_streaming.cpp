// cli/bench/bench_eviction_streaming.cpp: the streaming part of `lorakv bench eviction`
// (bench_eviction_streaming.h).
#include "lorakv/cli/bench/bench_eviction_streaming.h"

#include <algorithm>
#include <chrono>
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
  for (int64_t t = 0; t < o.decode_tokens; ++t) {
    std::vector<runtime::StepWork> work;
    for (int32_t r = 0; r < o.readers; ++r) {
      const int32_t token = text[static_cast<size_t>(std::min<int64_t>(from + t, static_cast<int64_t>(text.size()) - 1))];
      work.push_back({{ctx, r}, runtime::StepWork::Kind::kPrivate, {token}, 0, false});
    }
    LORAKV_CHECK(engine.step(work).ok, runtime::CapacityError, "streaming: a decode step did not fit the pools");
  }
  for (int32_t r = 0; r < o.readers; ++r) engine.drop_private({ctx, r});
}

}  // namespace

void run_eviction_streaming(const runtime::LlamaModel& model, const std::vector<int32_t>& tokens,
                            const EvictionStreamingOptions& o, const std::string& dir, std::ostream& out) {
  runtime::EngineOptions eo;
  eo.kv_pool_bytes = pool_rows(o, eo.block_size) * runtime::Engine::base_row_bytes(model, eo);
  runtime::Engine engine(model, eo);
  const int64_t total = std::min({o.total_tokens > 0 ? o.total_tokens : engine.max_context_tokens(),
                                  engine.max_context_tokens() - o.decode_tokens,
                                  static_cast<int64_t>(tokens.size()) - o.decode_tokens});
  const runtime::ContextId ctx =
      engine.create_context(context_options(o), std::vector<std::shared_ptr<const adapters::Adapter>>(static_cast<size_t>(o.readers)));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/eviction_streaming.csv";
  std::ofstream csv(path);
  csv << "policy,budget,chunk,readers,decode_tokens,tokens,kv_bytes_in_use,kv_bytes_peak,pool_reserved_bytes,"
         "host_metadata_bytes,trajectory_bytes,resident_bytes,seconds\n";
  char line[320];
  std::snprintf(line, sizeof line,
                "\nstreaming: %lld tokens in chunks of %lld into one base_shared context read by %lld agents, each "
                "decoding %lld tokens after every chunk; %s at %lld tokens; pools sized for %lld rows (%.1f MiB)\n",
                static_cast<long long>(total), static_cast<long long>(o.chunk), static_cast<long long>(o.readers),
                static_cast<long long>(o.decode_tokens), o.policy.c_str(), static_cast<long long>(o.budget),
                static_cast<long long>(pool_rows(o, eo.block_size)), mib(eo.kv_pool_bytes));
  out << line
      << "| tokens | KV in use MiB | KV peak MiB | pools reserved MiB | host metadata KiB | trajectory KiB | resident MiB | s |\n"
      << "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  const auto start = std::chrono::steady_clock::now();
  for (int64_t pos = 0; pos + o.chunk <= total; pos += o.chunk) {
    engine.append(ctx, std::vector<int32_t>(tokens.begin() + pos, tokens.begin() + pos + o.chunk));
    for (int32_t r = 0; r < o.readers; ++r) runtime::prefill(engine, {ctx, r});
    decode_and_drop(engine, ctx, tokens, pos + o.chunk, o);
    const int64_t done = pos + o.chunk;
    if (done % o.report_every != 0 && done + o.chunk <= total) continue;
    const runtime::EngineMemory memory = engine.memory();
    const cache::CacheStats& s = memory.cache;
    const int64_t rss = resident_bytes();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    csv << o.policy << "," << o.budget << "," << o.chunk << "," << o.readers << "," << o.decode_tokens << "," << done << ","
        << s.bytes_in_use << "," << s.peak_bytes_in_use << "," << s.reserved_bytes << "," << s.metadata_bytes << ","
        << memory.trajectory_bytes << "," << rss
        << "," << seconds << "\n";
    csv.flush();
    std::snprintf(line, sizeof line, "| %lld | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f |\n",
                  static_cast<long long>(done), mib(s.bytes_in_use), mib(s.peak_bytes_in_use), mib(s.reserved_bytes),
                  static_cast<double>(s.metadata_bytes) / 1024, static_cast<double>(memory.trajectory_bytes) / 1024,
                  mib(rss), seconds);
    out << line << std::flush;
  }
  out << "wrote " << path << "\n";
}

}  // namespace lorakv::cli
