// cli/run_printer.h: what `lorakv run` prints while a workflow runs: each turn streamed with
// its agent's name, tool calls and results, and the closing summary; as text for people or
// as one JSON object per event (--json). Also the progress line for long prefills.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "lorakv/agents/runtime.h"
#include "lorakv/agents/workflow_types.h"

namespace lorakv::cli {

// Per agent, over the whole run.
struct AgentTotals {
  int64_t turns = 0, tokens = 0;
  std::vector<double> ttft_s;
  double decode_s = 0;
  int64_t decode_tokens = 0;  // tokens after each reply's first
};

// What the summary states besides its numbers.
struct SummaryFacts {
  std::string mode;        // cache.mode
  int64_t block_size = 16;  // the pools' rows per block (full caches count whole blocks, as the pools do)
  size_t agents = 0;
  std::string eviction;    // "snapkv, budget 1024 tokens"; empty: no eviction
};

class RunPrinter {
 public:
  RunPrinter(std::ostream& out, bool json);
  // The observer a workflow streams through. on_text arrives on the engine thread, the
  // rest on the workflow's thread: one lock orders the output.
  agents::WorkflowObserver observer();
  void answer(const agents::WorkflowResult& result);
  void summary(const agents::SessionStats& session, const agents::RuntimeStats& runtime, const SummaryFacts& facts);
  const std::map<std::string, AgentTotals>& totals() const { return totals_; }
  // Per-agent totals start again (a new conversation).
  void reset_totals();

  // Whether an agent's turn has begun and printed no text yet (a prefill is running).
  bool waiting_for_first_text(std::string* agent) const;
  // Shows `line` in place of the previous progress line; anything printed next clears it.
  void progress(const std::string& line);

 private:
  void emit(const std::string& text);  // with the lock held

  std::ostream& out_;
  bool json_;
  mutable std::mutex mutex_;
  std::map<std::string, AgentTotals> totals_;
  std::string current_agent_;
  bool turn_has_text_ = true;
  bool progress_shown_ = false;
};

// "planner: processing the trajectory, 1536 tokens so far": on a terminal only (the caller
// decides), once a turn has waited a second for its first text; cleared by the next print.
class ProgressLine {
 public:
  // session_stats: the stats of the session whose prefill is shown (called on the line's thread).
  ProgressLine(RunPrinter& printer, std::function<agents::SessionStats()> session_stats);
  ~ProgressLine();  // stops its thread

 private:
  void loop();

  RunPrinter& printer_;
  std::function<agents::SessionStats()> session_stats_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lorakv::cli
