// runtime/driver.cpp: schedule, step, finish.
#include "lorakv/runtime/driver.h"

#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

namespace {

enum class Phase { kContext, kSuffix, kGenerate, kDone };

struct JobState {
  Phase phase = Phase::kContext;
  int32_t token = 0;  // kGenerate: the next token to run
};

std::string where(const DriverJob& job) {
  return "context " + std::to_string(job.reader.context.value()) + " reader " + std::to_string(job.reader.index);
}

void finish(DriverJob& job, JobState& s) {
  s.phase = Phase::kDone;
  if (job.on_done) job.on_done();
}

// The job has run everything it processes: generate from its last logits, or finish.
void start_generating(DriverJob& job, JobState& s) {
  if (!job.next) return finish(job, s);
  if (!job.logits.defined()) {
    throw ConfigError("a job that generates needs logits to start from",
                      {"", where(job), "", "", "give it a suffix (its instruction), or let it process its own context"});
  }
  const std::optional<int32_t> token = job.next(job.logits);
  if (!token) return finish(job, s);
  s.phase = Phase::kGenerate;
  s.token = *token;
}

// The job's work for the next step, or nullopt once it is done (phases advance here).
std::optional<StepWork> schedule(Engine& engine, DriverJob& job, JobState& s) {
  if (s.phase == Phase::kContext && engine.pending_tokens(job.reader) == 0) {
    s.phase = Phase::kSuffix;
    if (job.suffix.empty()) start_generating(job, s);
  }
  if (s.phase == Phase::kDone) return std::nullopt;
  StepWork w;
  w.reader = job.reader;
  if (s.phase == Phase::kContext) {
    w.kind = StepWork::Kind::kContext;
    w.max_tokens = job.max_chunk;
  } else {
    w.kind = StepWork::Kind::kPrivate;
    w.tokens = s.phase == Phase::kSuffix ? job.suffix : std::vector<int32_t>{s.token};
  }
  return w;
}

// Hands a job its step output: the last logits row, and the next token when it generates.
void take_output(Engine& engine, DriverJob& job, JobState& s, const StepOutput& out) {
  const int64_t rows = out.logits.size(0);
  if (s.phase == Phase::kContext) {
    if (rows > 0 && engine.pending_tokens(job.reader) == 0) job.logits = out.logits[rows - 1];
    return;
  }
  LORAKV_ASSERT(rows > 0, "private work ran without logits on " << where(job));
  job.logits = out.logits[rows - 1];
  start_generating(job, s);
}

}  // namespace

void Driver::run(std::vector<DriverJob>& jobs) {
  std::vector<JobState> states(jobs.size());
  while (true) {
    std::vector<StepWork> work;
    std::vector<size_t> owner;  // job of each work entry
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (states[j].phase == Phase::kDone) continue;
      if (std::optional<StepWork> w = schedule(engine_, jobs[j], states[j])) {
        work.push_back(std::move(*w));
        owner.push_back(j);
      }
    }
    if (work.empty()) return;
    const StepResult result = engine_.step(work);
    ++stats_.steps;
    stats_.tokens_processed += result.stats.tokens_processed;
    stats_.prefix_hit_tokens += result.stats.prefix_hit_tokens;
    stats_.deferred += result.stats.deferred;
    stats_.admit_seconds += result.stats.admit_seconds;
    stats_.run_seconds += result.stats.run_seconds;
    stats_.commit_seconds += result.stats.commit_seconds;
    stats_.write_seconds += result.stats.write_seconds;
    stats_.views_seconds += result.stats.views_seconds;
    stats_.kernel_seconds += result.stats.kernel_seconds;
    if (result.stats.admitted == 0) {
      throw CapacityError("the cache cannot hold the next step of any job: " + result.admissions.front().reason,
                          {"", where(jobs[owner.front()]), "", "",
                           "raise EngineOptions::kv_pool_bytes (or base_rows / residual_rows) or release contexts"});
    }
    if (hook_) hook_(engine_, result);  // the engine as the step left it
    for (size_t e = 0; e < work.size(); ++e) {
      if (result.admissions[e].admitted) take_output(engine_, jobs[owner[e]], states[owner[e]], result.outputs[e]);
    }
  }
}

at::Tensor prefill(Engine& engine, ReaderRef reader, const StepHook& hook) {
  Driver driver(engine, hook);
  std::vector<DriverJob> jobs(1);
  jobs[0].reader = reader;
  driver.run(jobs);
  return jobs[0].logits;
}

}  // namespace lorakv::runtime
