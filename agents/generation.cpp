// agents/generation.cpp: replies on the engine thread: start (checks, then one driver job
// per agent), each token (constraint, sampling, streaming, stops), the end (commit or drop),
// cancellation, deadlines and failures.
#include <algorithm>

#include "lorakv/agents/runtime_core.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents {

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

ReplyEnd reply_end(runtime::FinishReason reason) {
  switch (reason) {
    case runtime::FinishReason::kLength: return ReplyEnd::kLength;
    case runtime::FinishReason::kStopToken: return ReplyEnd::kEndOfTurn;
    case runtime::FinishReason::kStopString: return ReplyEnd::kStopString;
    case runtime::FinishReason::kCallback: return ReplyEnd::kCallback;
  }
  return ReplyEnd::kLength;
}


// A generation for `name`, checked; nothing changes yet.
std::shared_ptr<Generation> prepare(RuntimeCore& core, SessionState& s, int64_t session, const std::string& name,
                                    const GenerateOptions& options, Clock::time_point started,
                                    std::shared_ptr<Generation> g) {
  AgentState& a = core.agent(s, session, name);
  if (a.busy) {
    throw AgentBusyError("the agent is generating already", {"", name, "", "", "wait for its reply, or cancel it"});
  }
  if (!g) g = std::make_shared<Generation>();
  g->session = session;
  g->agent = name;
  g->reader = a.reader;
  g->options = options;
  if (g->raw_suffix) {  // a completion request: the reply continues the prompt, no header
    g->suffix = *g->raw_suffix;
  } else {
    g->header = core.layout->header(name);
    if (!a.options.instruction.empty()) g->suffix = core.layout->turn("system", a.options.instruction);
    g->has_instruction = !g->suffix.empty();
    g->suffix.insert(g->suffix.end(), g->header.begin(), g->header.end());
  }
  const std::vector<int32_t>& trajectory = core.engine->context_tokens(s.context);
  const auto used = static_cast<int64_t>(trajectory.size() + g->suffix.size());
  const int64_t limit = core.engine->context_limit(s.context);
  const int64_t room = limit - used;
  if (room < 1) {
    throw ContextLengthError("the trajectory and the agent's private tokens fill the model's context",
                             {"", name, "at most " + std::to_string(limit) + " tokens",
                              std::to_string(used) + " tokens", "start a new session, or shorten what is appended"});
  }
  runtime::ReplyRules rules = options;
  rules.max_tokens = std::min(options.max_tokens, room);
  std::vector<int32_t> seen = trajectory;
  seen.insert(seen.end(), g->suffix.begin(), g->suffix.end());
  g->decoder = std::make_unique<runtime::ReplyDecoder>(std::move(rules), &core.layout->tokenizer(), std::move(seen));
  g->started = started;
  if (options.timeout.count() > 0) g->deadline = started + options.timeout;
  g->reply.agent = name;
  return g;
}

}  // namespace

std::exception_ptr as_session_error(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const runtime::CapacityError& e) {  // the engine's; sessions report their own type
    return std::make_exception_ptr(SessionCapacityError(e.message(), e.context()));
  } catch (const Error&) {
    return std::current_exception();
  } catch (const std::exception& e) {  // libtorch's c10::Error, std::bad_alloc...: a caller maps Errors only
    return std::make_exception_ptr(InternalError(std::string("unexpected error: ") + e.what()));
  } catch (...) {
    return std::make_exception_ptr(InternalError("unexpected error of unknown type"));
  }
}

void RuntimeCore::start(int64_t session_id, const std::vector<std::string>& names, const GenerateOptions& options,
                        Clock::time_point started, std::shared_ptr<Generation> alone,
                        std::shared_ptr<GenerationGroup> group) {
  SessionState& s = session(session_id, "Session::generate");
  if (names.empty()) throw ConfigError("generate_all needs at least one agent", {"", "agents"});
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::count(names.begin(), names.end(), names[i]) > 1) {
      throw ConfigError("an agent is named twice in one generate_all", {"", names[i]});
    }
  }
  // Every check first: a refused call starts nothing.
  std::vector<std::shared_ptr<Generation>> gens;
  for (const std::string& name : names) {
    gens.push_back(prepare(*this, s, session_id, name, options, started, names.size() == 1 ? alone : nullptr));
  }
  for (size_t i = 0; i < gens.size(); ++i) {
    const std::shared_ptr<Generation>& g = gens[i];
    AgentState& a = s.agents.at(g->agent);
    if (group) {
      g->group = group;
      g->group_index = i;
      group->members.push_back(g);
    }
    runtime::DriverJob job;
    job.reader = g->reader;
    job.suffix = g->suffix;
    job.next = [this, raw = g.get()](const at::Tensor& logits) { return on_logits(*raw, logits); };
    job.on_done = [this, g] { on_ended(g); };
    job.on_error = [this, g](std::exception_ptr error) {
      g->error = as_session_error(error);
      on_ended(g);
    };
    job.on_output = [this, session_id](const runtime::StepOutput& out) {
      auto it = sessions.find(session_id);
      if (it == sessions.end()) return;
      it->second.stats.tokens_processed += out.tokens_processed;
      it->second.stats.prefix_hit_tokens += out.prefix_hit_tokens;
    };
    job.on_deferred = [this, session_id](const runtime::StepAdmission& why) {
      auto it = sessions.find(session_id);
      if (it != sessions.end() && why.waits_for < 0) ++it->second.stats.deferred_for_rows;  // not a same-step prefix wait
    };
    job.paused = [raw = g.get()] { return raw->request && raw->request->channel->full(); };
    job.priority = s.options.priority;
    job.group = session_id;
    job.group_token_cap = s.options.max_tokens_per_step;
    g->job = driver->add(std::move(job));
    a.busy = true;
    s.in_flight.push_back(g);
  }
}

std::optional<int32_t> RuntimeCore::on_logits(Generation& g, const at::Tensor& logits) {
  Reply& r = g.reply;
  runtime::ReplyDecoder& decoder = *g.decoder;
  if (decoder.done()) {  // max_tokens 0, or no room left in the model's context
    r.end = ReplyEnd::kLength;
    return std::nullopt;
  }
  const runtime::DecodedToken t = decoder.next(logits);
  const Clock::time_point now = Clock::now();
  if (r.tokens.empty()) {
    g.first_token = now;
    r.time_to_first_token_s = seconds_between(g.started, now);
  }
  g.last_token = now;
  r.tokens.push_back(t.token);
  if (g.options.logprobs) {
    r.logprobs.push_back(t.logprob);
    r.runner_up_logprobs.push_back(t.runner_up_logprob);
    if (g.options.top_logprobs > 0) r.top_logprobs.push_back(t.top);
  }
  r.text += t.text;
  if (g.request) request_token(g, t);
  if (!t.text.empty() && g.options.on_text && !g.options.on_text(t.text)) decoder.stop(runtime::FinishReason::kCallback);
  if (!decoder.done()) return t.token;
  r.end = reply_end(*decoder.finish());
  return std::nullopt;
}

// The reply joins the trajectory: header, generated tokens, <|im_end|> (when the agent did
// not write it), newline. Without an instruction the private rows are header + every
// generated token but the last (the driver never ran the last), and commit_private adopts
// them where the mode allows.
void RuntimeCore::commit(SessionState& s, Generation& g) {
  const std::vector<int32_t>& generated = g.reply.tokens;
  std::vector<int32_t> tail;
  if (g.has_instruction) {
    engine->drop_private(g.reader);
    tail = g.header;
    tail.insert(tail.end(), generated.begin(), generated.end());
  } else {
    engine->commit_private(g.reader);
    if (!generated.empty()) tail.push_back(generated.back());
  }
  if (generated.empty() || generated.back() != layout->end_id()) tail.push_back(layout->end_id());
  tail.insert(tail.end(), layout->newline().begin(), layout->newline().end());
  engine->append(s.context, tail, g.reader.index);  // the rest of the agent's turn
}

// Ends one generation in its session: appended (or its private rows dropped), the agent free.
void RuntimeCore::finish(SessionState* s, const std::shared_ptr<Generation>& g) {
  Reply& r = g->reply;
  if (g->forced_end) r.end = *g->forced_end;
  if (!r.tokens.empty()) r.decode_seconds = seconds_between(g->first_token, g->last_token);
  if (s == nullptr) return;
  s->in_flight.erase(std::remove(s->in_flight.begin(), s->in_flight.end(), g), s->in_flight.end());
  auto agent = s->agents.find(g->agent);
  const bool present = agent != s->agents.end() && !engine->has_left(g->reader);
  if (agent != s->agents.end()) agent->second.busy = false;
  if (present && !g->error && !g->forced_end && g->appends) {
    commit(*s, *g);
    r.appended = true;
    ++s->stats.replies;
  } else if (present) {
    engine->drop_private(g->reader);
  }
  s->stats.tokens_generated += static_cast<int64_t>(r.tokens.size());
  if (!r.tokens.empty()) {
    s->stats.last_time_to_first_token_s = r.time_to_first_token_s;
    s->decode_seconds += r.decode_seconds;
    s->decode_tokens += static_cast<int64_t>(r.tokens.size()) - 1;
  }
}

void RuntimeCore::on_ended(const std::shared_ptr<Generation>& g) {
  g->ended = true;
  auto it = sessions.find(g->session);
  SessionState* s = it == sessions.end() ? nullptr : &it->second;
  if (!g->group) {
    finish(s, g);
    if (g->request) return request_reply_ended(g);
    if (g->error) {
      g->promise.set_exception(g->error);
    } else {
      g->promise.set_value(std::move(g->reply));
    }
    return;
  }
  GenerationGroup& group = *g->group;
  if (++group.ended < group.members.size()) return;
  std::exception_ptr error;
  std::vector<Reply> replies;
  for (const std::shared_ptr<Generation>& m : group.members) {
    finish(s, m);
    if (m->error && !error) error = m->error;
    replies.push_back(std::move(m->reply));
  }
  std::shared_ptr<GenerationGroup> keep = g->group;  // members hold the group; release them below
  for (const std::shared_ptr<Generation>& m : keep->members) m->group.reset();
  if (error) {
    keep->promise.set_exception(error);
  } else {
    keep->promise.set_value(std::move(replies));
  }
}

void RuntimeCore::end_in_flight(SessionState& s, ReplyEnd end, const std::string& only_agent) {
  std::vector<std::shared_ptr<Generation>> targets;
  for (const std::shared_ptr<Generation>& g : s.in_flight) {
    if (only_agent.empty() || g->agent == only_agent) targets.push_back(g);
  }
  // Whole groups: a member that ended and waits for the others is not appended either.
  for (const std::shared_ptr<Generation>& g : targets) {
    if (!g->forced_end) g->forced_end = end;
  }
  for (const std::shared_ptr<Generation>& g : targets) {
    if (!g->ended) driver->cancel(g->job);
  }
}

bool RuntimeCore::has_work() {
  const Clock::time_point now = Clock::now();
  expire_waiting(now);
  std::vector<std::shared_ptr<Generation>> late;
  for (auto& [id, s] : sessions) {
    for (const std::shared_ptr<Generation>& g : s.in_flight) {
      if (!g->ended && g->deadline && now >= *g->deadline) late.push_back(g);
    }
  }
  for (const std::shared_ptr<Generation>& g : late) {
    if (g->ended) continue;
    g->forced_end = ReplyEnd::kDeadline;
    driver->cancel(g->job);
  }
  end_stalled(now);
  return driver->has_runnable_jobs();
}

void RuntimeCore::end_stalled(Clock::time_point now) {
  std::vector<std::shared_ptr<Generation>> stalled;
  for (auto& [id, s] : sessions) {
    for (const std::shared_ptr<Generation>& g : s.in_flight) {
      if (g->ended || !g->request) continue;
      if (!g->request->channel->full()) {
        g->paused_since.reset();
      } else if (!g->paused_since) {
        g->paused_since = now;
      } else if (now - *g->paused_since >= g->request->options.stall_timeout) {
        stalled.push_back(g);
      }
    }
  }
  for (const std::shared_ptr<Generation>& g : stalled) {
    if (g->ended) continue;
    g->forced_end = ReplyEnd::kStalled;
    driver->cancel(g->job);
  }
}

void RuntimeCore::fail_all(std::exception_ptr error) {
  std::vector<std::shared_ptr<Generation>> all;
  for (auto& [id, s] : sessions) all.insert(all.end(), s.in_flight.begin(), s.in_flight.end());
  for (const std::shared_ptr<Generation>& g : all) {
    if (g->ended) continue;
    g->error = as_session_error(error);
    driver->cancel(g->job);
  }
}

}  // namespace lorakv::agents
