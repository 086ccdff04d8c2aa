// cli/run_printer.cpp: `lorakv run`'s streamed turns, tool calls, answer and summary.
#include "lorakv/cli/run_printer.h"

#include <algorithm>
#include <cstdio>

#include "lorakv/cli/json_line.h"

namespace lorakv::cli {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

RunPrinter::RunPrinter(std::ostream& out, bool json) : out_(out), json_(json) {}

void RunPrinter::emit(const std::string& text) {
  if (progress_shown_) {
    out_ << "\r\033[K";  // clear the progress line, which replaced the turn's "[agent] "
    if (!turn_has_text_) out_ << "[" << current_agent_ << "] ";
    progress_shown_ = false;
  }
  out_ << text << std::flush;
}

void RunPrinter::progress(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  out_ << "\r\033[K" << line << std::flush;
  progress_shown_ = true;
}

bool RunPrinter::waiting_for_first_text(std::string* agent) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (turn_has_text_) return false;
  *agent = current_agent_;
  return true;
}

agents::WorkflowObserver RunPrinter::observer() {
  agents::WorkflowObserver o;
  o.on_append = [this](const std::string& role, const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    emit(json_ ? JsonLine().add("event", "append").add("role", role).add("text", text).str() + "\n"
               : "[" + role + "] " + text + "\n");
  };
  o.on_turn_start = [this](const std::string& agent) {
    std::lock_guard<std::mutex> lock(mutex_);
    current_agent_ = agent;
    turn_has_text_ = false;
    emit(json_ ? JsonLine().add("event", "turn_start").add("agent", agent).str() + "\n" : "[" + agent + "] ");
  };
  o.on_text = [this](const std::string& agent, const std::string& piece) {
    std::lock_guard<std::mutex> lock(mutex_);
    emit(json_ ? JsonLine().add("event", "text").add("agent", agent).add("text", piece).str() + "\n" : piece);
    turn_has_text_ = true;
  };
  o.on_turn_end = [this](const std::string& agent, const agents::Reply& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    AgentTotals& t = totals_[agent];
    ++t.turns;
    t.tokens += static_cast<int64_t>(r.tokens.size());
    if (!r.tokens.empty()) {
      t.ttft_s.push_back(r.time_to_first_token_s);
      t.decode_s += r.decode_seconds;
      t.decode_tokens += static_cast<int64_t>(r.tokens.size()) - 1;
    }
    if (json_) {
      emit(JsonLine()
               .add("event", "turn_end")
               .add("agent", agent)
               .add("text", r.text)
               .add("tokens", static_cast<int64_t>(r.tokens.size()))
               .add("end", agents::reply_end_name(r.end))
               .add("appended", r.appended)
               .add("time_to_first_token_s", r.time_to_first_token_s)
               .add("decode_s", r.decode_seconds)
               .str() +
           "\n");
    } else {
      emit(r.end == agents::ReplyEnd::kEndOfTurn ? "\n" : std::string("  (") + agents::reply_end_name(r.end) + ")\n");
    }
    turn_has_text_ = true;
  };
  o.on_tool_call = [this](const std::string& tool, const std::string& argument) {
    std::lock_guard<std::mutex> lock(mutex_);
    emit(json_ ? JsonLine().add("event", "tool_call").add("tool", tool).add("argument", argument).str() + "\n"
               : "  -> " + tool + "(" + argument + ")\n");
  };
  o.on_tool_result = [this](const std::string& tool, const agents::ToolResult& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (json_) {
      emit(JsonLine()
               .add("event", "tool_result")
               .add("tool", tool)
               .add("status", agents::tool_status_name(r.status))
               .add("text", r.text)
               .add("seconds", r.seconds)
               .str() +
           "\n");
    } else if (r.status != agents::ToolStatus::kOk) {
      emit(std::string("  <- ") + tool + ": " + agents::tool_status_name(r.status) + "\n");
    }
  };
  return o;
}

void RunPrinter::answer(const agents::WorkflowResult& result) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (json_) {
    JsonLine line;
    // Absent is null, never an empty string: no answer, or a run that was not stopped early.
    line.add("event", "result").add("steps", static_cast<int64_t>(result.steps));
    line.add("stopped_by", result.stopped_by.empty() ? formats::JsonValue{} : formats::JsonValue::make_string(result.stopped_by));
    line.add("answer", result.answer ? formats::JsonValue::make_string(*result.answer) : formats::JsonValue{});
    emit(line.str() + "\n");
    return;
  }
  std::string text = result.answer ? "answer: " + *result.answer : std::string("no answer");
  text += " (" + std::to_string(result.steps) + " steps" +
          (result.stopped_by.empty() ? "" : ", stopped by " + result.stopped_by) + ")\n";
  emit(text);
}

void RunPrinter::reset_totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  totals_.clear();
}

// Per agent: turns, tokens, time to first token, decode speed. Then the session's KV bytes
// by component next to N full caches: N agents each holding every trajectory token's K and
// V in whole blocks at the base pool's dtype, nothing evicted (what `full` would hold
// without private rows).
void RunPrinter::summary(const agents::SessionStats& s, const agents::RuntimeStats& rt, const SummaryFacts& f) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t block = f.block_size;
  const int64_t rows = (s.trajectory_tokens + block - 1) / block * block;
  const int64_t full_caches = static_cast<int64_t>(f.agents) * rows * rt.base_row_bytes;
  const int64_t kv = s.shared_kv_bytes + s.own_kv_bytes + s.residual_kv_bytes + s.private_kv_bytes;
  if (json_) {
    JsonLine per_agent;
    for (const auto& [name, t] : totals_) {
      per_agent.add(name, JsonLine()
                              .add("turns", t.turns)
                              .add("tokens", t.tokens)
                              .add("time_to_first_token_p50_s", median(t.ttft_s))
                              .add("decode_tokens_per_s", t.decode_s > 0 ? t.decode_tokens / t.decode_s : 0.0));
    }
    emit(JsonLine()
             .add("event", "summary")
             .add("mode", f.mode)
             .add("kv_dtype", rt.kv_dtype)
             .add("eviction", f.eviction.empty() ? formats::JsonValue{} : formats::JsonValue::make_string(f.eviction))
             .add("rows_evicted", rt.driver.rows_evicted)
             .add("trajectory_tokens", s.trajectory_tokens)
             .add("agents", per_agent)
             .add("kv_bytes", JsonLine()
                                  .add("shared", s.shared_kv_bytes)
                                  .add("own", s.own_kv_bytes)
                                  .add("residual", s.residual_kv_bytes)
                                  .add("private", s.private_kv_bytes)
                                  .add("total", kv)
                                  .add("n_full_caches", full_caches))
             .str() +
         "\n");
    return;
  }
  std::string text = "\nsummary (" + f.mode + ", " + std::to_string(s.trajectory_tokens) + " trajectory tokens, KV " +
                     rt.kv_dtype + ", " +
                     (f.eviction.empty() ? std::string("no eviction")
                                         : "eviction " + f.eviction + ": " + std::to_string(rt.driver.rows_evicted) +
                                               " rows evicted") +
                     ")\n";
  text += "agent         turns  tokens  ttft p50    decode tokens/s\n";
  for (const auto& [name, t] : totals_) {
    char line[160];
    std::snprintf(line, sizeof line, "%-12s  %5lld  %6lld  %7.3f s  %15.1f\n", name.c_str(),
                  static_cast<long long>(t.turns), static_cast<long long>(t.tokens), median(t.ttft_s),
                  t.decode_s > 0 ? static_cast<double>(t.decode_tokens) / t.decode_s : 0.0);
    text += line;
  }
  text += "KV: shared " + mib(s.shared_kv_bytes) + ", own " + mib(s.own_kv_bytes) + ", residual " +
          mib(s.residual_kv_bytes) + ", private " + mib(s.private_kv_bytes) + " = " + mib(kv) + "; " +
          std::to_string(f.agents) + " full " + rt.kv_dtype + " caches of the whole trajectory would hold " +
          mib(full_caches);
  if (kv > 0) {
    char ratio[48];
    std::snprintf(ratio, sizeof ratio, " (%.2fx)", static_cast<double>(full_caches) / static_cast<double>(kv));
    text += ratio;
  }
  emit(text + "\n");
}

ProgressLine::ProgressLine(RunPrinter& printer, std::function<agents::SessionStats()> session_stats)
    : printer_(printer), session_stats_(std::move(session_stats)), thread_([this] { loop(); }) {}

ProgressLine::~ProgressLine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProgressLine::loop() {
  using namespace std::chrono_literals;
  std::string agent;
  int waited = 0;  // quarter seconds the current turn has had no text
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, 250ms, [this] { return stop_; })) {
    if (!printer_.waiting_for_first_text(&agent)) {
      waited = 0;
      continue;
    }
    if (++waited < 4) continue;
    lock.unlock();
    try {
      const agents::SessionStats s = session_stats_();
      printer_.progress(agent + ": processing the trajectory (" + std::to_string(s.trajectory_tokens) + " tokens; " +
                        std::to_string(s.tokens_processed) + " rows run so far)");
    } catch (const std::exception&) {
      // The session closed under us: the run is ending.
    }
    lock.lock();
  }
}

}  // namespace lorakv::cli
