// agents/session.cpp: Session's methods. Each runs on the engine thread (Scheduler::call or
// post), where the session's state lives.
#include "lorakv/agents/session.h"

#include "lorakv/agents/alora_turn.h"
#include "lorakv/agents/runtime_core.h"
#include "lorakv/agents/session_file.h"
#include "lorakv/common/atomic_file.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents {

namespace {

// Waiting on the engine thread for work the engine thread does would never return.
void refuse_wait_on_engine_thread(const RuntimeCore& core, const std::string& what) {
  if (!core.scheduler->on_engine_thread()) return;
  throw DeadlockError(what + " was called from a token callback and would wait for the engine thread running it",
                      {"", what, "", "", "use generate_async and do not wait inside the callback"});
}

}  // namespace

Session::~Session() {
  try {
    if (core_->scheduler->on_engine_thread()) {
      // Dropped inside a token callback: the driver is mid-step, so close between steps.
      core_->scheduler->post([core = core_, id = id_] { core->close_session(id); });
    } else {
      close();
    }
  } catch (const std::exception&) {
    // The runtime has shut down: its sessions are closed already.
  }
}

void Session::add_agent(const AgentOptions& agent) {
  core_->scheduler->call(
      [this, &agent] {
        RuntimeCore& core = *core_;
        SessionState& s = core.session(id_, "Session::add_agent");
        if (agent.name.empty()) throw ConfigError("an agent needs a name (its turn name)", {"", "name"});
        if (s.agents.count(agent.name) > 0) {
          throw ConfigError("the session has an agent of that name already", {"", agent.name});
        }
        (void)core.layout->header(agent.name);  // a name that would break the layout is refused here
        std::shared_ptr<const adapters::Adapter> adapter;
        if (!agent.adapter.empty()) {
          adapter = core.registry->acquire(agent.adapter);
          if (!adapter) {
            throw UnknownAdapterError("no adapter " + agent.adapter + " is loaded",
                                      {"", agent.adapter, core.loaded_adapters(), "", "load it with Runtime::load_adapter"});
          }
        }
        if (adapter) check_turn_invokes(*core.layout, agent.name, agent.instruction, *adapter);
        const int32_t index = core.engine->add_reader(s.context, adapter);  // checks the mode can serve it
        s.agents[agent.name] =
            AgentState{agent, {s.context, index}, adapter ? adapter->identity() : AdapterIdentity::base_model(), false};
        core.update_reservation(s);
      },
      "Session::add_agent");
}

void Session::remove_agent(const std::string& name) {
  core_->scheduler->call(
      [this, &name] {
        SessionState& s = core_->session(id_, "Session::remove_agent");
        const AgentState& a = core_->agent(s, id_, name);
        const runtime::ReaderRef reader = a.reader;
        core_->end_in_flight(s, ReplyEnd::kCancelled, name);
        core_->engine->remove_reader(reader);
        s.agents.erase(name);
        core_->update_reservation(s);
        core_->admit_waiting();
      },
      "Session::remove_agent");
}

std::vector<std::string> Session::agents() const {
  return core_->scheduler->call(
      [this] {
        std::vector<std::string> names;
        for (const auto& [name, a] : core_->session(id_, "Session::agents").agents) names.push_back(name);
        return names;
      },
      "Session::agents");
}

namespace {

// `author`: the agent whose turn the tokens are (the writer author lets it write their rows).
void append_checked(RuntimeCore& core, SessionState& s, int64_t id, const std::vector<int32_t>& tokens,
                    std::optional<int32_t> author = std::nullopt) {
  const auto total = static_cast<int64_t>(core.engine->context_tokens(s.context).size() + tokens.size());
  if (total > core.engine->context_limit(s.context)) {
    throw ContextLengthError("session " + std::to_string(id) + " would exceed the model's context",
                             {"", "append", "at most " + std::to_string(core.engine->context_limit(s.context)) + " tokens",
                              std::to_string(total) + " tokens", "start a new session, or append less"});
  }
  core.engine->append(s.context, tokens, author);
}

}  // namespace

void Session::append(const std::string& role, const std::string& text) {
  core_->scheduler->call(
      [this, &role, &text] {
        SessionState& s = core_->session(id_, "Session::append");
        // An agent's role is its turn name: a turn in an agent's role is its turn, written as text.
        const auto agent = s.agents.find(role);
        const std::optional<int32_t> author =
            agent != s.agents.end() ? std::optional<int32_t>(agent->second.reader.index) : std::nullopt;
        append_checked(*core_, s, id_, core_->layout->turn(role, text), author);
      },
      "Session::append");
}

void Session::append_text(const std::string& text) {
  core_->scheduler->call(
      [this, &text] {
        SessionState& s = core_->session(id_, "Session::append_text");
        append_checked(*core_, s, id_, core_->layout->text(text));
      },
      "Session::append_text");
}

std::future<Reply> Session::generate_async(const std::string& agent, const GenerateOptions& options) {
  auto g = std::make_shared<Generation>();
  std::future<Reply> reply = g->promise.get_future();
  const Clock::time_point started = Clock::now();
  core_->scheduler->post([core = core_, id = id_, agent, options, started, g] {
    try {
      core->submit({id, {agent}, options, started, g, nullptr});
    } catch (...) {
      g->promise.set_exception(std::current_exception());
    }
  });
  return reply;
}

Reply Session::generate(const std::string& agent, const GenerateOptions& options) {
  refuse_wait_on_engine_thread(*core_, "Session::generate");
  return generate_async(agent, options).get();
}

std::vector<Reply> Session::generate_all(const std::vector<std::string>& agents, const GenerateOptions& options) {
  refuse_wait_on_engine_thread(*core_, "Session::generate_all");
  auto group = std::make_shared<GenerationGroup>();
  std::future<std::vector<Reply>> replies = group->promise.get_future();
  const Clock::time_point started = Clock::now();
  core_->scheduler->post([core = core_, id = id_, agents, options, started, group] {
    try {
      core->submit({id, agents, options, started, nullptr, group});
    } catch (...) {
      group->promise.set_exception(std::current_exception());
    }
  });
  return replies.get();
}

std::shared_ptr<Session> Session::fork() const {
  const int64_t id = core_->scheduler->call(
      [this] {
        RuntimeCore& core = *core_;
        const SessionState& s = core.session(id_, "Session::fork");
        if (!s.in_flight.empty()) {
          throw AgentBusyError("cannot fork a session while a reply is in flight",
                               {"", s.in_flight.front()->agent, "", "", "fork after the reply ends"});
        }
        SessionState copy;
        copy.options = s.options;
        copy.context = core.engine->fork_context(s.context);
        copy.agents = s.agents;
        for (auto& [name, a] : copy.agents) a.reader.context = copy.context;
        const int64_t fork_id = core.next_session++;
        core.sessions.emplace(fork_id, std::move(copy));
        return fork_id;
      },
      "Session::fork");
  return std::shared_ptr<Session>(new Session(core_, id));
}

void Session::save(const std::string& path) const {
  refuse_wait_on_engine_thread(*core_, "Session::save");
  const SessionFile file = core_->scheduler->call(
      [this] {
        RuntimeCore& core = *core_;
        const SessionState& s = core.session(id_, "Session::save");
        if (!s.in_flight.empty()) {
          throw AgentBusyError("cannot save a session while a reply is in flight",
                               {"", s.in_flight.front()->agent, "", "", "save after the reply ends"});
        }
        SessionFile f;
        f.model_sha256 = core.model_identity();
        f.options = s.options;
        std::vector<int32_t> readers;
        for (const auto& [name, a] : s.agents) {
          f.agents.push_back({a.options, a.adapter});
          readers.push_back(a.reader.index);
        }
        f.rows = core.engine->export_context(s.context, readers);
        return f;
      },
      "Session::save");
  write_file_atomically(path, encode_session(file));  // off the engine thread
}

void Session::cancel() {
  core_->scheduler->post([core = core_, id = id_] {
    auto it = core->sessions.find(id);
    if (it == core->sessions.end()) return;
    core->end_waiting(id, ReplyEnd::kCancelled);
    core->end_in_flight(it->second, ReplyEnd::kCancelled);
    core->admit_waiting();
  });
}

void Session::close() {
  core_->scheduler->call([this] { core_->close_session(id_); }, "Session::close");
}

bool Session::closed() const {
  try {
    return core_->scheduler->call([this] { return core_->sessions.count(id_) == 0; }, "Session::closed");
  } catch (const SessionClosedError&) {
    return true;  // the runtime has shut down
  }
}

SessionStats Session::stats() const {
  return core_->scheduler->call(
      [this] {
        const SessionState& s = core_->session(id_, "Session::stats");
        SessionStats out = s.stats;
        out.trajectory_tokens = static_cast<int64_t>(core_->engine->context_tokens(s.context).size());
        const runtime::ContextMemory m = core_->engine->context_memory(s.context);
        out.shared_kv_bytes = m.shared_bytes;
        out.own_kv_bytes = m.own_bytes;
        out.residual_kv_bytes = m.residual_bytes;
        out.private_kv_bytes = m.private_bytes;
        if (s.decode_seconds > 0) out.decode_tokens_per_second = static_cast<double>(s.decode_tokens) / s.decode_seconds;
        return out;
      },
      "Session::stats");
}

std::vector<int32_t> Session::tokens() const {
  return core_->scheduler->call(
      [this] { return core_->engine->context_tokens(core_->session(id_, "Session::tokens").context); },
      "Session::tokens");
}

std::string Session::text() const {
  return core_->layout->tokenizer().decode(tokens(), /*render_special=*/true);
}

}  // namespace lorakv::agents
