// cli/bench/bench_eviction_layout.cpp: `lorakv bench eviction-layout`: what an eviction costs
// the cache in each of its two layouts, on the real model's cache shape. Every step appends
// one token (K, V and a rank-8 residual row, written at every layer) and evicts back to the
// budget, as a decode step under a policy does:
//   release  CacheManager::evict (whole blocks dropped, the rest masked) and packing once
//            masked rows reach a quarter of the resident rows (the engine's rule);
//   pack     compaction at every eviction (the survivors packed to the front).
// Two eviction patterns: `sliding` (StreamingLLM: sinks + the newest rows) and `scattered`
// (H2O-like: sinks, a recent window and the best of fixed random scores). Reported per
// step: host time of the eviction (and packing) call, rows moved, and the pools' bytes in
// use. The sides alternate per repetition; the ratio pack / release is taken in one run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

const char* kHelp = R"(usage: lorakv bench eviction-layout [flags]

What one eviction costs the paged cache in its two layouts (release-and-mask, and packing
at every eviction), on SmolLM2-135M's cache shape (30 layers, 3 KV heads of 64, blocks of
16 rows, float32, one rank-8 residual stream). Each step appends one token and evicts back
to the budget, with a sliding (StreamingLLM) and a scattered (H2O-like) pattern. Writes
eviction_layout.csv under --out. Run it with nothing else on the machine.

flags:
  --budget N        live rows per lane (default 1024)
  --steps N         measured steps per run (default 512)
  --repetitions N   runs per layout and pattern, sides alternated (default 3)
  --out DIR         where the CSV goes (default bench_results/eviction)
)";

constexpr int64_t kLayers = 30, kKvHeads = 3, kHeadDim = 64, kBlock = 16, kRank = 8, kSinks = 4, kWindow = 16;

enum class Layout { kRelease, kPack };
enum class Pattern { kSliding, kScattered };
const char* name(Layout l) { return l == Layout::kRelease ? "release" : "pack"; }
const char* name(Pattern p) { return p == Pattern::kSliding ? "sliding" : "scattered"; }

struct RunResult {
  double eviction_us_per_step = 0;
  double rows_moved_per_step = 0;
  double bytes_in_use_mean = 0;
  int64_t bytes_peak = 0;
};

const cache::ContentKey kBaseKey = cache::ContentKey::base(cache::StorageDtype::kFloat32);
const cache::ContentKey kStream =
    cache::ContentKey::residual(cache::StreamKind::kResidualV, cache::StorageDtype::kFloat32, AdapterIdentity{sha256("group")});

// A fixed pseudo-random score per position (the scattered pattern's "attention mass").
float score_of(int32_t position) {
  uint32_t x = static_cast<uint32_t>(position) * 2654435761u;
  x ^= x >> 15;
  return static_cast<float>(x % 100000);
}

// Rows of `lane` to keep: live rows, of which the sinks, the newest kWindow and then the
// newest (sliding) or best-scored (scattered) up to the budget.
std::vector<int64_t> keep_rows(const cache::CacheManager& m, SeqId seq, int64_t lane, int64_t budget, Pattern p) {
  const cache::BaseLane& l = m.sequence(seq).lanes[static_cast<size_t>(lane)];
  const std::vector<int64_t> live = m.live_rows(seq, lane);
  const auto n = static_cast<int64_t>(live.size());
  if (n <= budget) return live;
  std::vector<uint8_t> keep(static_cast<size_t>(n), 0);
  int64_t kept = 0;
  std::vector<int64_t> rest;
  for (int64_t i = 0; i < n; ++i) {
    if (l.positions[static_cast<size_t>(live[static_cast<size_t>(i)])] < kSinks || i >= n - kWindow) {
      keep[static_cast<size_t>(i)] = 1;
      ++kept;
    } else {
      rest.push_back(i);
    }
  }
  const int64_t room = std::max<int64_t>(0, budget - kept);
  if (p == Pattern::kScattered) {
    std::sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) {
      return score_of(l.positions[static_cast<size_t>(live[static_cast<size_t>(a)])]) >
             score_of(l.positions[static_cast<size_t>(live[static_cast<size_t>(b)])]);
    });
    for (int64_t j = 0; j < room; ++j) keep[static_cast<size_t>(rest[static_cast<size_t>(j)])] = 1;
  } else {
    for (int64_t j = static_cast<int64_t>(rest.size()) - room; j < static_cast<int64_t>(rest.size()); ++j) {
      keep[static_cast<size_t>(rest[static_cast<size_t>(j)])] = 1;
    }
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    if (keep[static_cast<size_t>(i)]) out.push_back(live[static_cast<size_t>(i)]);
  }
  return out;
}

// Appends `count` tokens with random rows (K, V [count, kv_heads, head_dim]; C [count, rank]).
void append_tokens(cache::PagedKvCache& c, SeqId seq, int64_t count) {
  std::optional<cache::AppendSlots> slots =
      c.append(seq, {std::vector<int32_t>(static_cast<size_t>(count), 1), AdapterIdentity::base_model(), {{kStream, count}}});
  LORAKV_ASSERT(slots.has_value(), "bench pools too small");
  const cache::WritePlan plan = c.plan_writes(*slots);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    c.write_base(plan, layer, at::randn({count, kKvHeads, kHeadDim}), at::randn({count, kKvHeads, kHeadDim}));
    c.write_residual(plan, 0, layer, at::randn({count, kRank}));
  }
}

int64_t rows_to_move(const cache::CacheManager& m, SeqId seq, const cache::KeepSets& keep) {
  int64_t moved = 0;
  for (size_t lane = 0; lane < keep.size(); ++lane) {
    const int64_t rows = m.sequence(seq).lanes[lane].table.num_rows;
    moved += static_cast<int64_t>(cache::plan_compaction(rows, keep[lane], kBlock).moves.size());
  }
  return moved * 2;  // base and residual rows alike
}

RunResult run_once(Layout layout, Pattern pattern, int64_t budget, int64_t steps) {
  cache::CacheConfig cfg;
  cfg.layout = {kLayers, kKvHeads, kHeadDim, kBlock, kKvHeads};
  cfg.num_base_blocks = kLayers * (2 * budget / kBlock + 16);  // release may hold a third more rows, masked
  cfg.residual_pools = {{kRank, cfg.num_base_blocks}};
  cache::PagedKvCache c(cfg);
  const SeqId seq(1);
  c.create_sequence(seq, kBaseKey);
  c.attach_residual(seq, kStream, std::vector<int64_t>(kLayers, kRank), {});
  for (int64_t filled = 0; filled < budget; filled += 64) append_tokens(c, seq, std::min<int64_t>(64, budget - filled));
  RunResult r;
  double seconds = 0, bytes_sum = 0;
  int64_t moved = 0;
  for (int64_t step = 0; step < steps; ++step) {
    append_tokens(c, seq, 1);
    cache::KeepSets keep(static_cast<size_t>(c.layout().num_lanes()));
    for (int64_t lane = 0; lane < c.layout().num_lanes(); ++lane) {
      keep[static_cast<size_t>(lane)] = keep_rows(c.manager(), seq, lane, budget, pattern);
    }
    const auto start = std::chrono::steady_clock::now();
    if (layout == Layout::kPack) {
      moved += rows_to_move(c.manager(), seq, keep);
      LORAKV_ASSERT(c.compact(seq, keep), "packing needs no block here");
    } else {
      c.evict(seq, keep);
      int64_t masked = 0, rows = 0;
      for (const cache::BaseLane& l : c.manager().sequence(seq).lanes) {
        masked += l.num_evicted;
        rows += l.table.num_rows;
      }
      if (masked > 0 && 4 * masked >= rows) {
        cache::KeepSets live(keep.size());
        for (size_t lane = 0; lane < keep.size(); ++lane) live[lane] = c.manager().live_rows(seq, static_cast<int64_t>(lane));
        moved += rows_to_move(c.manager(), seq, live);
        LORAKV_ASSERT(c.compact(seq, live), "packing needs no block here");
      }
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t bytes = c.stats().bytes_in_use;
    bytes_sum += static_cast<double>(bytes);
    r.bytes_peak = std::max(r.bytes_peak, bytes);
  }
  r.eviction_us_per_step = seconds * 1e6 / static_cast<double>(steps);
  r.rows_moved_per_step = static_cast<double>(moved) / static_cast<double>(steps);
  r.bytes_in_use_mean = bytes_sum / static_cast<double>(steps);
  return r;
}


}  // namespace

int run_eviction_layout_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, {"--budget", "--steps", "--repetitions", "--out"}, {"--help"}, "bench eviction-layout");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  const int64_t budget = a.get_int("--budget", 1024, 64, 1 << 20);
  const int64_t steps = a.get_int("--steps", 512, 1, 1 << 20);
  const int64_t reps = a.get_int("--repetitions", 3, 1, 100);
  const std::string dir = a.get("--out").value_or("bench_results/eviction");
  std::filesystem::create_directories(dir);
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads\n"
      << "device: CPU (host bookkeeping and pool copies); sizes: " << kLayers << " layers, " << kKvHeads << " KV heads of "
      << kHeadDim << ", blocks of " << kBlock << ", float32 rows, one rank-" << kRank << " residual stream; budget "
      << budget << " rows per lane, " << steps << " steps per run, " << reps << " repetitions\n";
  std::ofstream csv(dir + "/eviction_layout.csv");
  csv << "pattern,layout,repetition,budget,steps,eviction_us_per_step,rows_moved_per_step,bytes_in_use_mean,bytes_peak\n";
  char line[256];
  for (Pattern p : {Pattern::kSliding, Pattern::kScattered}) {
    std::vector<double> us[2], moved[2], bytes[2];
    for (int64_t rep = 0; rep < reps; ++rep) {
      const Layout order[2] = {rep % 2 == 0 ? Layout::kRelease : Layout::kPack, rep % 2 == 0 ? Layout::kPack : Layout::kRelease};
      for (Layout l : order) {
        const RunResult r = run_once(l, p, budget, steps);
        const auto side = static_cast<size_t>(l);
        us[side].push_back(r.eviction_us_per_step);
        moved[side].push_back(r.rows_moved_per_step);
        bytes[side].push_back(r.bytes_in_use_mean);
        csv << name(p) << "," << name(l) << "," << rep << "," << budget << "," << steps << "," << r.eviction_us_per_step
            << "," << r.rows_moved_per_step << "," << r.bytes_in_use_mean << "," << r.bytes_peak << "\n";
        csv.flush();
      }
    }
    std::snprintf(line, sizeof line,
                  "%-9s release: %8.1f us/step, %8.1f rows moved/step, %6.2f MiB in use | pack: %8.1f us/step, %8.1f "
                  "rows moved/step, %6.2f MiB | pack/release time %.2fx, memory %.3fx\n",
                  name(p), median(us[0]), median(moved[0]), median(bytes[0]) / (1 << 20), median(us[1]), median(moved[1]),
                  median(bytes[1]) / (1 << 20), median(us[1]) / median(us[0]), median(bytes[1]) / median(bytes[0]));
    out << line;
  }
  out << "wrote " << dir << "/eviction_layout.csv\n";
  return 0;
}

}  // namespace lorakv::cli
