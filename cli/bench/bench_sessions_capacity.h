// cli/bench/bench_sessions_capacity.h: the capacity part of `lorakv bench sessions`: one KV
// pool that just fits N base_lr_shared sessions' reservations, and the same N sessions in
// `full` and `base_lr_shared` through it (whole-session admission: what does not fit waits).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace lorakv::cli {

struct CapacityBenchOptions {
  std::string model, assets, out;
  int64_t sessions = 16;  // N: the pool fits this many base_lr_shared sessions
  int64_t turns = 4, tokens = 16, repetitions = 3;
};

// Runs the comparison, writes capacity.csv under options.out, prints a summary to `out`.
void run_capacity_bench(const CapacityBenchOptions& options, const std::vector<std::string>& questions,
                        std::ostream& out);

}  // namespace lorakv::cli
