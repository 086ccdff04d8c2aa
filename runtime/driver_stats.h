// runtime/driver_stats.h: what a driver's steps did, summed (runtime/driver.h); torch-free,
// so the sessions API's stats (agents/session_types.h) carry it without the engine's headers.
#pragma once

#include <cstdint>

namespace lorakv::runtime {

// Sums over the steps a driver ran.
struct DriverStats {
  int64_t steps = 0;
  int64_t tokens_processed = 0;   // rows run through the model
  int64_t prefix_hit_tokens = 0;  // context tokens whose rows were adopted from the prefix index
  int64_t deferred = 0;           // work entries a step could not take (capacity, or a same-step prefix)
  // Host wall time per phase (runtime/engine.h, StepStats): planning and reservation, the
  // forward pass, the commit; inside the forward pass the row writes, the views and the
  // attention kernel; the eviction after each step.
  double admit_seconds = 0, run_seconds = 0, commit_seconds = 0;
  double write_seconds = 0, views_seconds = 0, kernel_seconds = 0;
  int64_t rows_evicted = 0;
  double evict_seconds = 0;
};

}  // namespace lorakv::runtime
