// runtime/driver.h: the one loop that drives an Engine. Jobs say what a reader wants: its
// context processed (in chunks), private tokens run after it (an agent's instruction), and
// tokens generated one per step while a callback returns them. The driver turns the jobs
// into steps (schedule), runs them one at a time (step), hands each job its logits and calls
// the step hook (finish). generate(), the benchmarks and the tests drive the engine through
// it; the sessions' scheduler runs it on its own thread. Synchronous and not thread-safe:
// run() returns when every job is done.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lorakv/runtime/engine.h"

namespace lorakv::runtime {

struct DriverJob {
  ReaderRef reader;
  std::vector<int32_t> suffix;  // private tokens run after the context; may be empty
  // Given float32 [vocab], the logits of the last row run for the job (the context's last
  // token, the suffix's last, then each generated token's), returns the next token to run as
  // private work, or nullopt: done. Null: the job only processes its context and suffix.
  std::function<std::optional<int32_t>(const at::Tensor& logits)> next;
  // Called once when the job is done; the driver never touches the job's reader after it
  // (it may release the context).
  std::function<void()> on_done;
  int64_t max_chunk = 0;  // context tokens per step; 0: EngineOptions::prefill_chunk
  // Out: float32 [vocab], the last logits the job saw; undefined when it ran no row of its
  // own (a reader of rows others wrote, with no suffix).
  at::Tensor logits;
};

// Called after every step, before the jobs see its outputs, with the engine (mutable: a
// policy may compact or release between steps) and what the step did.
using StepHook = std::function<void(Engine& engine, const StepResult& result)>;

// Sums over the steps a driver ran.
struct DriverStats {
  int64_t steps = 0;
  int64_t tokens_processed = 0, prefix_hit_tokens = 0, deferred = 0;
  double admit_seconds = 0, run_seconds = 0, commit_seconds = 0;
  double write_seconds = 0, views_seconds = 0, kernel_seconds = 0;
};

class Driver {
 public:
  explicit Driver(Engine& engine, StepHook hook = nullptr) : engine_(engine), hook_(std::move(hook)) {}

  // Runs the jobs until each is done, one engine step at a time; work an entry could not
  // get this step (deferred) is asked for again in the next. Throws CapacityError when a
  // step admits none of the work (the pools cannot hold it even alone), ConfigError for a
  // job that generates but has no logits to start from (it read rows others wrote and has
  // no suffix). An exception from a step or a callback leaves the engine usable (a failed
  // step is rolled back) and the remaining jobs unfinished.
  void run(std::vector<DriverJob>& jobs);

  Engine& engine() { return engine_; }
  const DriverStats& stats() const { return stats_; }

 private:
  Engine& engine_;
  StepHook hook_;
  DriverStats stats_;
};

// Processes everything `reader` needs of its context, through a Driver. Returns float32
// [vocab]: the reader's logits at the context's last token when it processed that token,
// else undefined (it read rows others wrote). Throws CapacityError when the pools are full.
at::Tensor prefill(Engine& engine, ReaderRef reader, const StepHook& hook = nullptr);

}  // namespace lorakv::runtime
