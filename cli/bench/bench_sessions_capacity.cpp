// cli/bench/bench_sessions_capacity.cpp: N sessions of three role agents, each on its own
// caller thread (its turns, then close), all started at once against a KV pool sized to
// hold exactly N base_lr_shared reservations (SessionOptions::reserve_tokens). In `full`
// each session reserves its three agents' own rows, so fewer are admitted at once and the
// rest wait for a session to close. Reported per mode: sessions admitted at once, aggregate
// tokens/s and time to first token (waiting included), alternating the modes per repetition.
#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/bench/bench_sessions_capacity.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "lorakv/agents/runtime.h"

namespace lorakv::cli {

namespace {

using runtime::SharingMode;
using Clock = std::chrono::steady_clock;

const char* kSystem = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].";
const char* kRoles[] = {"planner", "actor", "reflector"};
constexpr int64_t kBlockSize = 16;

struct CapacityRun {
  double wall_s = 0;
  int64_t generated = 0, peak_admitted = 0;
  std::vector<double> ttft;
};

int64_t blocks(int64_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }

// Each session's reservation: its system turn and question (at most 64 tokens here), then
// `turns` turns of a header, at most `tokens` tokens and the end of turn.
agents::SessionOptions reserved(SharingMode mode, const CapacityBenchOptions& o) {
  agents::SessionOptions s{mode, runtime::SharedWriter::kFirst};
  s.reserve_reply_tokens = o.tokens + 8;
  s.reserve_tokens = 64 + o.turns * s.reserve_reply_tokens;
  return s;
}

// Bytes of a base pool holding N base_lr_shared reservations: one shared row set for the
// trajectory and one reply per agent (agents/admission.cpp counts the same way).
int64_t pool_bytes(const CapacityBenchOptions& o, int64_t row_bytes) {
  const agents::SessionOptions s = reserved(SharingMode::kBaseLrShared, o);
  const int64_t per_session = blocks(s.reserve_tokens) + 3 * blocks(s.reserve_reply_tokens);
  return o.sessions * per_session * kBlockSize * row_bytes;
}


CapacityRun run_once(SharingMode mode, const CapacityBenchOptions& o, const std::vector<std::string>& qs,
                     int64_t pool) {
  agents::RuntimeOptions ro;
  ro.model = o.model;
  ro.kv_pool_bytes = pool;
  ro.block_size = kBlockSize;
  agents::Runtime rt(ro);
  for (const char* role : kRoles) rt.load_adapter(role, o.assets + "/role_adapters/qv_shared_a/" + role);
  std::vector<std::shared_ptr<agents::Session>> sessions;
  for (int64_t i = 0; i < o.sessions; ++i) {
    auto s = rt.open_session(reserved(mode, o));
    for (const char* role : kRoles) s->add_agent({role, role, ""});
    s->append("system", kSystem);
    s->append("user", qs[static_cast<size_t>(i) % qs.size()]);
    sessions.push_back(std::move(s));
  }
  std::vector<std::vector<agents::Reply>> replies(sessions.size());
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> callers;
  for (size_t i = 0; i < sessions.size(); ++i) {
    callers.emplace_back([&, i] {
      agents::GenerateOptions g;
      g.max_tokens = o.tokens;
      for (int64_t t = 0; t < o.turns; ++t) replies[i].push_back(sessions[i]->generate(t % 2 == 0 ? "planner" : "actor", g));
      sessions[i]->close();  // its reservation goes: a waiting session is admitted
    });
  }
  for (std::thread& t : callers) t.join();
  CapacityRun run;
  run.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (const auto& per_session : replies) {
    for (const agents::Reply& r : per_session) {
      run.generated += static_cast<int64_t>(r.tokens.size());
      run.ttft.push_back(r.time_to_first_token_s);
    }
  }
  run.peak_admitted = rt.stats().peak_admitted_sessions;
  return run;
}

int64_t base_row_bytes(const std::string& model) {
  agents::RuntimeOptions ro;
  ro.model = model;
  ro.kv_pool_bytes = int64_t{16} << 20;
  return agents::Runtime(ro).stats().base_row_bytes;
}

}  // namespace

void run_capacity_bench(const CapacityBenchOptions& o, const std::vector<std::string>& qs, std::ostream& out) {
  const int64_t pool = pool_bytes(o, base_row_bytes(o.model));
  std::ofstream csv(o.out + "/capacity.csv");
  csv << "mode,sessions,pool_bytes,repetition,peak_admitted,wall_s,generated_tokens,tokens_per_s,ttft_p50_s,ttft_p95_s\n";
  std::map<SharingMode, std::vector<CapacityRun>> runs;
  for (int64_t rep = 0; rep < o.repetitions; ++rep) {
    std::vector<SharingMode> order = {SharingMode::kBaseLrShared, SharingMode::kFull};
    if (rep % 2 == 1) std::reverse(order.begin(), order.end());
    for (SharingMode mode : order) {
      CapacityRun r = run_once(mode, o, qs, pool);
      char row[256];
      std::snprintf(row, sizeof row, "%s,%lld,%lld,%lld,%lld,%.4f,%lld,%.2f,%.4f,%.4f\n", runtime::sharing_mode_name(mode),
                    static_cast<long long>(o.sessions), static_cast<long long>(pool), static_cast<long long>(rep),
                    static_cast<long long>(r.peak_admitted), r.wall_s, static_cast<long long>(r.generated),
                    static_cast<double>(r.generated) / r.wall_s, percentile(r.ttft, 0.5), percentile(r.ttft, 0.95));
      csv << row << std::flush;
      runs[mode].push_back(std::move(r));
    }
  }
  out << "capacity: a " << (pool >> 10) << " KiB pool that fits " << o.sessions
      << " base_lr_shared sessions' reservations, " << o.sessions << " sessions started at once\n"
      << "mode            admitted at once  tokens/s  ttft p50   ttft p95\n";
  std::map<SharingMode, double> rate;
  for (SharingMode mode : {SharingMode::kFull, SharingMode::kBaseLrShared}) {
    std::vector<double> rates, ttft;
    int64_t admitted = 0;
    for (const CapacityRun& r : runs[mode]) {
      rates.push_back(static_cast<double>(r.generated) / r.wall_s);
      ttft.insert(ttft.end(), r.ttft.begin(), r.ttft.end());
      admitted = std::max(admitted, r.peak_admitted);
    }
    rate[mode] = percentile(rates, 0.5);
    char line[200];
    std::snprintf(line, sizeof line, "%-14s  %16lld  %8.1f  %8.4f  %8.4f\n", runtime::sharing_mode_name(mode),
                  static_cast<long long>(admitted), rate[mode], percentile(ttft, 0.5), percentile(ttft, 0.95));
    out << line;
  }
  char line[120];
  std::snprintf(line, sizeof line, "base_lr_shared / full aggregate tokens/s in the same pool: %.2fx\n",
                rate[SharingMode::kBaseLrShared] / rate[SharingMode::kFull]);
  out << line << "wrote " << o.out << "/capacity.csv\n";
}

}  // namespace lorakv::cli
