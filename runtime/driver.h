// runtime/driver.h: the one loop that drives an Engine. Jobs say what a reader wants: its
// context processed (in chunks), private tokens run after it (an agent's instruction), and
// tokens generated one per step while a callback returns them. The driver turns the jobs
// into steps (schedule), runs them one at a time (step), evicts after each (Engine::evict),
// calls the step hook and hands each job its logits (finish). generate(), perplexity, the
// benchmarks and the tests drive the engine through run(); the sessions' scheduler adds jobs
// between steps (add, cancel, step) on its own thread. Not thread-safe: one thread uses a
// driver and its engine.
//
// Teacher forcing (DriverJob::all_logits): a job that only processes text (no `next`) and
// asks for every row's logits gets them chunk by chunk through on_output, with eviction
// between chunks: what perplexity and the fidelity replays read.
//
// A step's token budget (DriverOptions::step_token_budget) is filled as vLLM's chunked
// prefill fills it: private tokens first (each generating job's next token, suffixes), by
// priority, then context chunks with what is left, so a long appended text is processed
// in chunks beside everyone's decoding instead of stalling it.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "lorakv/runtime/driver_stats.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::runtime {

struct DriverJob {
  ReaderRef reader;
  std::vector<int32_t> suffix;  // private tokens run after the context; may be empty
  // Given float32 [vocab], the logits of the last row run for the job (the context's last
  // token, the suffix's last, then each generated token's), returns the next token to run as
  // private work, or nullopt: done. Null: the job only processes its context and suffix.
  std::function<std::optional<int32_t>(const at::Tensor& logits)> next;
  // Called once when the job is done or cancelled; the driver never touches the job's reader
  // after it (it may release the context).
  std::function<void()> on_done;
  // Called with each step output of the job's work (its tokens processed, prefix hits, and
  // its logits: the last row's, or every row's with all_logits).
  std::function<void(const StepOutput&)> on_output;
  // Called when a step could not take the job's work (the pools were short, or it waits
  // for rows another entry writes in the same step); it is asked again next step.
  std::function<void(const StepAdmission&)> on_deferred;
  // Every processed row's logits to on_output (context chunks and the suffix), not only
  // the last: the teacher-forced job kind.
  bool all_logits = false;
  // When set, a failure of this job (a callback threw, or the pools cannot hold its next step
  // even when it runs alone) is handed here instead of propagating, the job ends (on_done is
  // not called) and the driver goes on with the others.
  std::function<void(std::exception_ptr)> on_error;
  // When set and true, the job sits out the next step (its rows stay; it is asked again the
  // step after): a request whose reader has not taken its events pauses this way.
  std::function<bool()> paused;
  int64_t max_chunk = 0;        // context tokens per step; 0: EngineOptions::prefill_chunk
  int32_t priority = 0;         // higher first when a step's token budget cannot take every job
  int64_t group = -1;           // jobs of one group (a session) share group_token_cap
  int64_t group_token_cap = 0;  // most tokens the group runs in one step; 0: no cap
  // Out: float32 [vocab], the last logits the job saw; undefined when it ran no row of its
  // own (a reader of rows others wrote, with no suffix).
  at::Tensor logits;
  int64_t tokens_processed = 0;   // out: rows the job's own work entries ran
  int64_t prefix_hit_tokens = 0;  // out: its context tokens adopted from the prefix index
};

// Called after every step and its eviction, before the jobs see its outputs, with the engine
// (mutable: a policy may compact or release between steps) and what the step did.
using StepHook = std::function<void(Engine& engine, const StepResult& result)>;

struct DriverOptions {
  int64_t step_token_budget = 0;  // most tokens one step runs over all jobs; 0: no limit
};


using JobId = int64_t;

class Driver {
 public:
  explicit Driver(Engine& engine, StepHook hook = nullptr, DriverOptions options = {});
  ~Driver();
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // Runs the jobs until each is done, one engine step at a time; work an entry could not
  // get this step (deferred) is asked for again in the next. Throws CapacityError when a
  // step admits none of the work (the pools cannot hold it even alone), ConfigError for a
  // job that generates but has no logits to start from (it read rows others wrote and has
  // no suffix). An exception from a step or a callback of a job without on_error leaves the
  // engine usable (a failed step is rolled back) and the remaining jobs unfinished. An
  // exception from the eviction after a step, from the hook or from a job's callback comes
  // after every job of the step has its output (the step's rows stand; the next eviction
  // evicts what is left); the first of them is rethrown.
  // Jobs added with add() wait until run() returns.
  void run(std::vector<DriverJob>& jobs);

  // Incremental use: jobs join between steps and leave when done or cancelled.
  JobId add(DriverJob job);
  // Ends a job that is not done: calls its on_done and drops it. false: no such job.
  bool cancel(JobId job);
  // One step over the added jobs. false: there was nothing to run. Failures are handled as
  // in run(): handed to the job's on_error, else thrown (the job stays).
  bool step();
  size_t num_jobs() const;
  // Whether some added job is not paused: step() would run something (or finish it).
  bool has_runnable_jobs() const;

  Engine& engine() { return engine_; }
  const DriverStats& stats() const { return stats_; }

  struct Slot;  // a job and its phase (driver.cpp)

 private:
  bool step_over(std::map<JobId, Slot>& slots);

  Engine& engine_;
  StepHook hook_;
  DriverOptions options_;
  DriverStats stats_;
  std::unique_ptr<std::map<JobId, Slot>> jobs_;  // added with add()
  JobId next_job_ = 0;
};

// A job that runs `tokens` (at least one) as the reader's private work one token a step,
// as decoding runs them, whatever its logits say: teacher-forced decoding (the decode
// benchmarks). Processes the reader's pending context first.
DriverJob forced_decode_job(ReaderRef reader, std::vector<int32_t> tokens);

// Processes everything `reader` needs of its context, through a Driver. Returns float32
// [vocab]: the reader's logits at the context's last token when it processed that token,
// else undefined (it read rows others wrote). Throws CapacityError when the pools are full.
at::Tensor prefill(Engine& engine, ReaderRef reader, const StepHook& hook = nullptr);

}  // namespace lorakv::runtime
