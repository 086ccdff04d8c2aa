// cli/bench/episode_runs.h: the episodes of `lorakv bench episodes`: a held-out question of
// the agentic QA task through the react workflow (agents/workflow_react.h), greedy, in one
// sharing mode and writer; every question of a mode, C sessions at once from C threads; and
// the runtime each mode runs on, its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "lorakv/agents/runtime.h"
#include "lorakv/agents/tools.h"
#include "lorakv/cli/bench/episode_rows.h"
#include "lorakv/runtime/sharing_mode.h"

namespace lorakv::cli {

struct Question {
  std::string id, question, answer;
  int64_t kind = 0;
};

// The first `n` questions of a task file (assets/agentic_qa/test.jsonl).
std::vector<Question> read_questions(const std::string& path, int64_t n);

struct ModeSpec {
  runtime::SharingMode mode = runtime::SharingMode::kFull;
  runtime::SharedWriter writer = runtime::SharedWriter::kFirst;
  std::string name() const;  // "full", "base_lr_shared:first", ...
};

// What each mode's runtime and sessions are made of.
struct EpisodeSetup {
  std::string model;     // GGUF file
  std::string adapters;  // folder of one adapter set: planner/, actor/, reflector/
  const agents::ToolRegistry* tools = nullptr;
  int64_t concurrency = 16;  // sessions at once
  int max_rounds = 6;        // planner+actor rounds per episode
};

// A runtime with the model and the set's role adapters, loaded as "planner", "actor" and
// "reflector". `bench episodes` opens one per mode: a context's result must not depend on
// the contexts run before it, and on one runtime a mode would adopt the cached rows of the
// modes before it wherever their keys and writers match (docs/sharing_modes.md, "Reuse"),
// which moves its float32 sums (other batch shapes) and its wall time.
std::unique_ptr<agents::Runtime> open_episode_runtime(const EpisodeSetup& setup);

// Every question of `qs` in mode `m` on `rt`, setup.concurrency sessions at once; each
// episode goes to `done_episode` (called under a lock) as it ends, its elapsed time counted
// from `start`. Progress lines go to `out`.
void run_mode(agents::Runtime& rt, const ModeSpec& m, const std::vector<Question>& qs, const EpisodeSetup& setup,
              std::chrono::steady_clock::time_point start,
              const std::function<void(const Question&, EpisodeResult)>& done_episode, std::ostream& out);

}  // namespace lorakv::cli
