// cli/session_run.cpp: the run loop of `lorakv run` and `lorakv chat`.
#include "lorakv/cli/session_run.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <iostream>
#include <memory>
#include <sstream>

#include "lorakv/agents/configured_session.h"
#include "lorakv/cli/cli.h"
#include "lorakv/cli/interrupts.h"
#include "lorakv/cli/json_line.h"
#include "lorakv/cli/run_printer.h"
#include "lorakv/common/atomic_file.h"

namespace lorakv::cli {

namespace {

const char* kSlashHelp = "commands: /reset (a new conversation), /stats (the summary so far), /help; "
                         "Ctrl-C ends a reply, Ctrl-C at the prompt or a second one ends the session\n";

// The transcript (output.transcript): one JSON line per turn, in trajectory order. Every
// key but "stats" is the same for the same config, seed and input, so two runs diff clean
// with the stats left out.
std::string transcript_lines(const std::vector<agents::WorkflowTurn>& turns) {
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const agents::WorkflowTurn& t = turns[i];
    JsonLine line;
    line.add("turn", static_cast<int64_t>(i)).add("role", t.role).add("text", t.text);
    if (t.kind == agents::WorkflowTurn::Kind::kAgent) {
      line.add("tokens", t.reply.tokens).add("end", agents::reply_end_name(t.reply.end)).add("appended", t.reply.appended);
      line.add("stats", JsonLine()
                            .add("generated_tokens", static_cast<int64_t>(t.reply.tokens.size()))
                            .add("time_to_first_token_s", t.reply.time_to_first_token_s)
                            .add("decode_s", t.reply.decode_seconds));
    }
    if (t.kind == agents::WorkflowTurn::Kind::kTool) {
      line.add("tool", t.tool).add("status", agents::tool_status_name(t.tool_result.status));
      line.add("stats", JsonLine().add("seconds", t.tool_result.seconds));
    }
    out += line.str() + "\n";
  }
  return out;
}

// What the summary states besides its numbers.
SummaryFacts summary_facts(const agents::config::SessionConfig& c) {
  SummaryFacts f;
  f.mode = c.cache.mode;
  f.block_size = c.cache.block_size;
  f.agents = c.agents.size();
  const cache::eviction::EvictionConfig& e = c.cache.eviction;
  if (e.policy != "none") {
    std::ostringstream os;
    os << e.policy << ", budget ";
    if (e.budget_tokens > 0) {
      os << e.budget_tokens << " tokens";
    } else {
      os << e.budget_fraction << " of the context";
    }
    f.eviction = os.str();
  }
  return f;
}

// One conversation: a session on the runtime (a new one after /reset), and whether a
// Ctrl-C asked its replies to end. The watcher thread cancels while the main thread may
// replace the session: one lock orders them.
class Conversation {
 public:
  Conversation(agents::Runtime& rt, const agents::config::SessionConfig& c) : rt_(rt), c_(c) { reset(); }

  std::shared_ptr<agents::Session> session() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return session_;
  }
  // A new session, the old one closed (its rows freed) outside the lock: closing waits for
  // the engine thread, whose token callback may be waiting for the lock.
  void reset() {
    std::shared_ptr<agents::Session> old = agents::open_configured_session(rt_, c_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(old, session_);
    }
    if (old) old->close();
  }
  void cancel() {
    cancelling_.store(true);
    if (std::shared_ptr<agents::Session> s = session()) s->cancel();
  }
  bool cancelling() const { return cancelling_.load(); }
  void begin_run() { cancelling_.store(false); }

 private:
  agents::Runtime& rt_;
  const agents::config::SessionConfig& c_;
  mutable std::mutex mutex_;
  std::shared_ptr<agents::Session> session_;
  std::atomic<bool> cancelling_{false};
};

}  // namespace

int run_session(const agents::config::SessionConfig& c, const SessionRunOptions& o, std::istream& in,
                std::ostream& out) {
  agents::Runtime rt(agents::runtime_options(c));
  Conversation conversation(rt, c);
  const agents::ToolRegistry tools = agents::configured_tools(c);
  RunPrinter printer(out, o.json);
  const bool terminal = &out == &std::cout && isatty(STDOUT_FILENO) != 0;
  std::optional<ProgressLine> progress;
  if (!o.json && terminal) progress.emplace(printer, [&conversation] { return conversation.session()->stats(); });

  // Every reply of a run a Ctrl-C interrupted ends at its first token (the watcher's cancel
  // reaches only the reply in flight at the time).
  agents::WorkflowObserver observer = printer.observer();
  observer.on_text = [&conversation, print = observer.on_text](const std::string& agent, const std::string& piece) {
    print(agent, piece);
    if (conversation.cancelling()) conversation.cancel();
  };
  InterruptWatch interrupts([&conversation](int) { conversation.cancel(); });

  std::vector<agents::WorkflowTurn> turns;
  auto run_once = [&](const std::string& input) {
    conversation.begin_run();
    const agents::ConfiguredRun run = agents::run_configured_workflow(*conversation.session(), c, tools, input, observer);
    if (o.print_answer) printer.answer(run.result);
    turns.insert(turns.end(), run.result.turns.begin(), run.result.turns.end());
  };
  auto summary = [&] { printer.summary(conversation.session()->stats(), rt.stats(), summary_facts(c)); };
  bool interrupted = false;  // a Ctrl-C ended the command, not its input
  if (o.interactive) {
    const bool prompt = !o.json && terminal && &in == &std::cin && isatty(STDIN_FILENO) != 0;
    if (prompt && o.slash_commands) out << kSlashHelp;
    for (std::string line;;) {
      if (prompt) out << o.prompt << std::flush;
      const int before = interrupts.count();
      const bool got = static_cast<bool>(std::getline(in, line));
      if (interrupts.count() > before) {  // Ctrl-C at the prompt
        interrupted = true;
        break;
      }
      if (!got || line.empty()) break;
      if (o.slash_commands && line == "/stats") {
        summary();
      } else if (o.slash_commands && line == "/reset") {
        conversation.reset();
        printer.reset_totals();
        out << "(conversation reset)\n";
      } else if (o.slash_commands && line[0] == '/') {
        out << kSlashHelp;
      } else {
        run_once(line);
        if (interrupts.count() >= 2) {  // the second Ctrl-C came during the run
          interrupted = true;
          break;
        }
      }
    }
  } else {
    run_once(o.input.value_or(""));
    interrupted = interrupts.count() > 0;
  }
  progress.reset();
  summary();
  if (!c.output.transcript.empty()) {
    const std::string text = transcript_lines(turns);
    write_file_atomically(c.output.transcript, std::vector<uint8_t>(text.begin(), text.end()));
    if (!o.json) out << "wrote " << c.output.transcript << "\n";
  }
  return interrupted ? kExitInterrupted : 0;
}

}  // namespace lorakv::cli
