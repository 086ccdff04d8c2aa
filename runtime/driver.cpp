// runtime/driver.cpp: schedule (phases, the token budget), step, finish.
#include "lorakv/runtime/driver.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

namespace {

enum class Phase { kContext, kSuffix, kGenerate, kDone };

std::string where(const DriverJob& job) {
  return "context " + std::to_string(job.reader.context.value()) + " reader " + std::to_string(job.reader.index);
}

}  // namespace

struct Driver::Slot {
  DriverJob* job = nullptr;
  std::unique_ptr<DriverJob> owned;  // jobs added with add(); run()'s jobs belong to its caller
  Phase phase = Phase::kContext;
  int32_t token = 0;  // kGenerate: the next token to run
};

namespace {

using Slot = Driver::Slot;

void finish(Slot& s) {
  s.phase = Phase::kDone;
  if (s.job->on_done) s.job->on_done();
}

// The job has run everything it processes: generate from its last logits, or finish.
void start_generating(Slot& s) {
  DriverJob& job = *s.job;
  if (!job.next) return finish(s);
  if (!job.logits.defined()) {
    throw ConfigError("a job that generates needs logits to start from",
                      {"", where(job), "", "", "give it a suffix (its instruction), or let it process its own context"});
  }
  const std::optional<int32_t> token = job.next(job.logits);
  if (!token) return finish(s);
  s.phase = Phase::kGenerate;
  s.token = *token;
}

// The job's work for the next step, or nullopt once it is done (phases advance here).
std::optional<StepWork> schedule(Engine& engine, Slot& s) {
  if (s.phase == Phase::kContext && engine.pending_tokens(s.job->reader) == 0) {
    s.phase = Phase::kSuffix;
    if (s.job->suffix.empty()) start_generating(s);
  }
  if (s.phase == Phase::kDone) return std::nullopt;
  if (s.phase == Phase::kContext) return StepWork::context(s.job->reader, s.job->max_chunk, s.job->all_logits);
  return StepWork::private_tokens(s.job->reader, s.phase == Phase::kSuffix ? s.job->suffix : std::vector<int32_t>{s.token},
                                  s.job->all_logits);
}

// Hands a job its step output: the last logits row, and the next token when it generates.
void take_output(Engine& engine, Slot& s, const StepOutput& out) {
  DriverJob& job = *s.job;
  job.tokens_processed += out.tokens_processed;
  job.prefix_hit_tokens += out.prefix_hit_tokens;
  if (job.on_output) job.on_output(out);
  const int64_t rows = out.logits.size(0);
  if (s.phase == Phase::kContext) {
    if (rows > 0 && engine.pending_tokens(job.reader) == 0) job.logits = out.logits[rows - 1];
    return;
  }
  LORAKV_ASSERT(rows > 0, "private work ran without logits on " << where(job));
  job.logits = out.logits[rows - 1];
  start_generating(s);
}

bool is_paused(const DriverJob& job) { return job.paused && job.paused(); }

// Hands a failure to the job's on_error and ends the job. false: the job has no on_error
// (the caller rethrows).
bool fail(Slot& s, std::exception_ptr error) {
  if (!s.job->on_error) return false;
  s.phase = Phase::kDone;
  s.job->on_error(error);
  return true;
}

struct Candidate {
  JobId id;
  StepWork work;
};

// Fills one step's token budget: private work first, then context chunks; each class by
// priority (higher first), then by arrival. Work that does not fit waits for a later step;
// the first candidate always runs, so every step makes progress.
class BudgetFill {
 public:
  BudgetFill(Engine& engine, int64_t budget)
      : engine_(engine), left_(budget > 0 ? budget : std::numeric_limits<int64_t>::max()) {}

  void take(std::vector<Candidate>& candidates, std::map<JobId, Slot>& slots, bool private_work) {
    std::vector<Candidate*> order;
    for (Candidate& c : candidates) {
      if ((c.work.kind == StepWork::Kind::kPrivate) == private_work) order.push_back(&c);
    }
    std::stable_sort(order.begin(), order.end(), [&](const Candidate* a, const Candidate* b) {
      return slots.at(a->id).job->priority > slots.at(b->id).job->priority;
    });
    for (Candidate* c : order) {
      const DriverJob& job = *slots.at(c->id).job;
      int64_t room = left_;
      if (job.group_token_cap > 0) room = std::min(room, job.group_token_cap - group_used_[job.group]);
      int64_t cost = static_cast<int64_t>(c->work.tokens.size());
      if (!private_work) {
        const int64_t chunk = job.max_chunk > 0 ? job.max_chunk : engine_.options().prefill_chunk;
        cost = std::min({chunk, engine_.pending_tokens(job.reader), std::max<int64_t>(room, 1)});
        c->work.max_tokens = cost;
      }
      if (cost > room && !work.empty()) continue;
      left_ -= std::min(cost, left_);
      group_used_[job.group] += cost;
      work.push_back(std::move(c->work));
      owner.push_back(c->id);
    }
  }

  std::vector<StepWork> work;
  std::vector<JobId> owner;  // job of each work entry

 private:
  Engine& engine_;
  int64_t left_;
  std::map<int64_t, int64_t> group_used_;
};

void add_stats(DriverStats& stats, const StepResult& result) {
  ++stats.steps;
  stats.tokens_processed += result.stats.tokens_processed;
  stats.prefix_hit_tokens += result.stats.prefix_hit_tokens;
  stats.deferred += result.stats.deferred;
  stats.admit_seconds += result.stats.admit_seconds;
  stats.run_seconds += result.stats.run_seconds;
  stats.commit_seconds += result.stats.commit_seconds;
  stats.write_seconds += result.stats.write_seconds;
  stats.views_seconds += result.stats.views_seconds;
  stats.kernel_seconds += result.stats.kernel_seconds;
  stats.rows_evicted += result.stats.rows_evicted;
  stats.evict_seconds += result.stats.evict_seconds;
}

}  // namespace

Driver::Driver(Engine& engine, StepHook hook, DriverOptions options)
    : engine_(engine), hook_(std::move(hook)), options_(options), jobs_(std::make_unique<std::map<JobId, Slot>>()) {}

Driver::~Driver() = default;

bool Driver::step_over(std::map<JobId, Slot>& slots) {
  std::vector<Candidate> candidates;
  for (auto it = slots.begin(); it != slots.end();) {
    if (is_paused(*it->second.job)) {
      ++it;
      continue;
    }
    std::optional<StepWork> w;
    try {
      w = schedule(engine_, it->second);
    } catch (...) {
      if (!fail(it->second, std::current_exception())) throw;
    }
    if (!w) {
      it = slots.erase(it);
      continue;
    }
    candidates.push_back({it->first, std::move(*w)});
    ++it;
  }
  if (candidates.empty()) return false;
  BudgetFill fill(engine_, options_.step_token_budget);
  fill.take(candidates, slots, /*private_work=*/true);
  fill.take(candidates, slots, /*private_work=*/false);

  StepResult result;
  try {
    result = engine_.step(fill.work);  // rolled back when it throws
  } catch (...) {
    // Not one job's fault: every job of the step fails, if each can take it.
    const bool all_handle = std::all_of(fill.owner.begin(), fill.owner.end(),
                                        [&](JobId id) { return static_cast<bool>(slots.at(id).job->on_error); });
    if (!all_handle) throw;
    for (JobId id : fill.owner) fail(slots.at(id), std::current_exception());
    return true;
  }
  // The step's rows stand from here on: a failure of eviction or of the hook is reported
  // (rethrown) only after every job has its output.
  std::exception_ptr after_step;
  try {
    engine_.evict(result.stats);
  } catch (...) {
    after_step = std::current_exception();
  }
  add_stats(stats_, result);
  if (result.stats.admitted == 0) {
    Slot& first = slots.at(fill.owner.front());
    try {
      throw CapacityError("the cache cannot hold the next step of this job even alone: " + result.admissions.front().reason,
                          {"", where(*first.job), "", "",
                           "give the pools more room (YAML cache.pool_bytes; EngineOptions::kv_pool_bytes, or base_rows / "
                           "residual_rows) or release contexts"});
    } catch (...) {
      if (!fail(first, std::current_exception())) throw;
    }
  }
  if (hook_) {
    try {
      hook_(engine_, result);  // the engine as the step and its eviction left it
    } catch (...) {
      if (!after_step) after_step = std::current_exception();
    }
  }
  for (size_t e = 0; e < fill.work.size(); ++e) {
    Slot& s = slots.at(fill.owner[e]);
    if (!result.admissions[e].admitted) {
      if (s.job->on_deferred) s.job->on_deferred(result.admissions[e]);
      continue;
    }
    try {
      take_output(engine_, s, result.outputs[e]);
    } catch (...) {
      if (!fail(s, std::current_exception())) {
        if (!after_step) after_step = std::current_exception();
      }
    }
  }
  if (after_step) std::rethrow_exception(after_step);
  return true;
}

void Driver::run(std::vector<DriverJob>& jobs) {
  std::map<JobId, Slot> slots;
  for (size_t j = 0; j < jobs.size(); ++j) slots[static_cast<JobId>(j)].job = &jobs[j];
  while (step_over(slots)) {
  }
}

JobId Driver::add(DriverJob job) {
  const JobId id = next_job_++;
  Slot& s = (*jobs_)[id];
  s.owned = std::make_unique<DriverJob>(std::move(job));
  s.job = s.owned.get();
  return id;
}

bool Driver::cancel(JobId job) {
  auto it = jobs_->find(job);
  if (it == jobs_->end() || it->second.phase == Phase::kDone) return false;
  Slot slot = std::move(it->second);
  jobs_->erase(it);
  finish(slot);
  return true;
}

bool Driver::step() { return step_over(*jobs_); }

size_t Driver::num_jobs() const { return jobs_->size(); }

bool Driver::has_runnable_jobs() const {
  return std::any_of(jobs_->begin(), jobs_->end(), [](const auto& entry) { return !is_paused(*entry.second.job); });
}

DriverJob forced_decode_job(ReaderRef reader, std::vector<int32_t> tokens) {
  LORAKV_CHECK(!tokens.empty(), InvalidArgumentError, "forced_decode_job needs at least one token");
  DriverJob job;
  job.reader = reader;
  job.suffix = {tokens.front()};
  auto next = std::make_shared<size_t>(1);  // index of the token after the one just run
  job.next = [tokens = std::move(tokens), next](const at::Tensor&) -> std::optional<int32_t> {
    if (*next >= tokens.size()) return std::nullopt;
    return tokens[(*next)++];
  };
  return job;
}

at::Tensor prefill(Engine& engine, ReaderRef reader, const StepHook& hook) {
  Driver driver(engine, hook);
  std::vector<DriverJob> jobs(1);
  jobs[0].reader = reader;
  driver.run(jobs);
  return jobs[0].logits;
}

}  // namespace lorakv::runtime
