// agents/request.cpp: request handles. submit() checks and encodes on the caller's thread
// and posts one command; open_request() runs it on the engine thread (sessions, adapter,
// trajectory, forks, replies); the replies' tokens and ends come back through
// request_token() and request_reply_ended(); the handle reads the channel.
#include <algorithm>

#include "lorakv/agents/alora_turn.h"
#include "lorakv/agents/runtime.h"
#include "lorakv/agents/runtime_core.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"

namespace lorakv::agents {

namespace {

constexpr int64_t kMostReplies = 16;

void check_request(const RequestOptions& o, const formats::BpeTokenizer& tokenizer) {
  runtime::validate(o, tokenizer.vocab_size());
  check_session_options(o.session);
  if (o.prompt.has_value() == !o.messages.empty()) {
    throw ConfigError("a request has messages or a prompt", {"", o.prompt ? "prompt" : "messages", "exactly one of them",
                                                             o.prompt ? "both" : "neither"});
  }
  if (o.n < 1 || o.n > kMostReplies) {
    throw ConfigError("n is out of range", {"", "n", "1.." + std::to_string(kMostReplies), std::to_string(o.n)});
  }
  if (o.max_pending_events < 1) throw ConfigError("max_pending_events must be at least 1", {"", "max_pending_events"});
  if (o.stall_timeout.count() <= 0) throw ConfigError("stall_timeout must be positive", {"", "stall_timeout"});
  if (o.timeout.count() < 0) throw ConfigError("timeout must be 0 (none) or more", {"", "timeout"});
  if (o.max_prompt_tokens < 0) throw ConfigError("max_prompt_tokens must be 0 (none) or more", {"", "max_prompt_tokens"});
}

// The request's trajectory: its messages as turns (content as plain text), or the prompt.
std::vector<int32_t> encode_request(const RequestOptions& o, const ChatLayout& layout) {
  if (o.prompt) {
    std::vector<int32_t> ids = layout.tokenizer().encode(*o.prompt, /*parse_special=*/false);
    if (ids.empty()) throw ConfigError("the prompt is empty", {"", "prompt", "some text", "nothing"});
    return ids;
  }
  (void)layout.header(o.role);  // a role that would break the layout is refused here
  std::vector<int32_t> ids;
  for (const Message& m : o.messages) {
    const std::vector<int32_t> turn = layout.turn(m.role, m.content);
    ids.insert(ids.end(), turn.begin(), turn.end());
  }
  return ids;
}

// Reply i's options: the request's rules, seed + i.
GenerateOptions reply_options(const RequestOptions& o, int64_t index) {
  GenerateOptions g;
  static_cast<runtime::ReplyRules&>(g) = o;
  g.sampling.seed = o.sampling.seed + static_cast<uint64_t>(index);
  g.timeout = o.timeout;
  return g;
}

// The request's end: on_complete, then kDone (a reader that took kDone sees its effects).
void end_request(RequestState& r) {
  if (r.options.on_complete) {
    try {
      r.options.on_complete(r.result);
    } catch (const std::exception& e) {
      log::warn(std::string("a request's on_complete threw: ") + e.what());
    }
  }
  r.channel->finish(r.result);
}

}  // namespace

void RequestChannel::push(RequestEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(std::move(event));
  }
  changed.notify_all();
}

void RequestChannel::accept(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (accepted) return;
    accepted = true;
    refused = error;
  }
  changed.notify_all();
}

void RequestChannel::finish(RequestResult r) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    result = std::move(r);
    RequestEvent done;
    done.kind = RequestEvent::Kind::kDone;
    events.push_back(std::move(done));
  }
  changed.notify_all();
}

bool RequestChannel::full() const {
  std::lock_guard<std::mutex> lock(mutex);
  return events.size() >= capacity;
}

std::shared_ptr<RequestHandle> Runtime::submit(RequestOptions request) {
  check_request(request, core_->layout->tokenizer());
  auto state = std::make_shared<RequestState>();
  state->prompt = encode_request(request, *core_->layout);  // tokenizing stays off the engine thread
  if (request.max_prompt_tokens > 0 && static_cast<int64_t>(state->prompt.size()) > request.max_prompt_tokens) {
    throw ContextLengthError("the request's prompt is longer than its limit",
                             {"", "max_prompt_tokens", "at most " + std::to_string(request.max_prompt_tokens) + " tokens",
                              std::to_string(state->prompt.size()) + " tokens", "shorten the messages or the prompt"});
  }
  state->id = core_->next_request++;
  state->channel = std::make_shared<RequestChannel>(request.max_pending_events);
  state->submitted = Clock::now();
  state->options = std::move(request);
  state->options.messages.clear();  // encoded: the engine thread needs only the ids
  std::shared_ptr<RequestHandle> handle(new RequestHandle(core_, state->channel, state->id));
  core_->scheduler->post([core = core_, state] { core->open_request(state); });
  return handle;
}

void RuntimeCore::open_request(const std::shared_ptr<RequestState>& r) {
  const RequestOptions& o = r->options;
  try {
    std::shared_ptr<const adapters::Adapter> adapter;
    if (!o.adapter.empty()) {
      adapter = registry->acquire(o.adapter);
      if (!adapter) {
        throw UnknownAdapterError("no adapter " + o.adapter + " is loaded",
                                  {"", o.adapter, loaded_adapters(), "", "load it with Runtime::load_adapter"});
      }
      if (o.prompt && adapter->activated()) {
        throw ConfigError("an activated LoRA answers chat requests only (its invocation is the turn header)",
                          {"", "prompt", "messages", "a prompt", "send messages"});
      }
      if (!o.prompt) check_turn_invokes(*layout, o.role, "", *adapter);
    }
    std::vector<int32_t> context = r->prompt;
    std::optional<std::vector<int32_t>> raw_suffix;
    if (o.prompt) {  // the prompt's last token runs as the reply's own work: its logits start the reply
      raw_suffix = std::vector<int32_t>{context.back()};
      context.pop_back();
    }
    SessionState first;
    first.options = o.session;
    first.context = engine->create_context({o.session.mode, o.session.writer, o.session.eviction}, {});
    const int64_t first_id = next_session++;
    sessions.emplace(first_id, std::move(first));
    r->sessions.push_back(first_id);
    SessionState& s = sessions.at(first_id);
    const int32_t reader = engine->add_reader(s.context, adapter);  // checks the mode can serve it
    s.agents[o.role] = AgentState{AgentOptions{o.role, o.adapter, ""}, {s.context, reader},
                                  adapter ? adapter->identity() : AdapterIdentity::base_model(), false};
    engine->append(s.context, context);
    for (int64_t i = 1; i < o.n; ++i) {  // the other replies fork the trajectory: its rows are shared
      SessionState copy;
      copy.options = s.options;
      copy.context = engine->fork_context(s.context);
      copy.agents = s.agents;
      for (auto& [name, a] : copy.agents) a.reader.context = copy.context;
      const int64_t id = next_session++;
      sessions.emplace(id, std::move(copy));
      r->sessions.push_back(id);
    }
    r->result.choices.resize(static_cast<size_t>(o.n));
    for (int64_t i = 0; i < o.n; ++i) {
      auto g = std::make_shared<Generation>();
      g->request = r;
      g->choice = i;
      g->raw_suffix = raw_suffix;
      g->appends = false;  // the request's sessions end with it
      r->replies.push_back(g);
    }
    requests[r->id] = r;
    for (int64_t i = 0; i < o.n; ++i) {
      submit({r->sessions[static_cast<size_t>(i)], {o.role}, reply_options(o, i), r->submitted, r->replies[i], nullptr});
    }
    r->channel->accept();
  } catch (...) {
    const std::exception_ptr error = as_session_error(std::current_exception());
    requests.erase(r->id);
    for (const std::shared_ptr<Generation>& g : r->replies) g->request.reset();  // nothing of it reaches the channel
    for (int64_t id : r->sessions) close_session(id);
    r->channel->accept(error);
    r->result = RequestResult{};
    r->result.error = error;
    end_request(*r);
  }
}

void RuntimeCore::cancel_request(int64_t id) {
  auto it = requests.find(id);
  if (it == requests.end()) return;  // over already
  const std::shared_ptr<RequestState> r = it->second;
  for (int64_t session : r->sessions) {
    end_waiting(session, ReplyEnd::kCancelled);
    auto s = sessions.find(session);
    if (s != sessions.end()) end_in_flight(s->second, ReplyEnd::kCancelled);
  }
  admit_waiting();
}

void RuntimeCore::request_token(Generation& g, const runtime::DecodedToken& token) {
  RequestState& r = *g.request;
  if (!r.first_token) {
    r.first_token = true;
    r.result.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - r.submitted).count();
  }
  RequestEvent e;
  e.kind = RequestEvent::Kind::kToken;
  e.choice = g.choice;
  e.token = token;
  r.channel->push(std::move(e));
}

void RuntimeCore::request_reply_ended(const std::shared_ptr<Generation>& g) {
  const std::shared_ptr<RequestState> r = g->request;
  Reply& reply = g->reply;
  Choice& c = r->result.choices[static_cast<size_t>(g->choice)];
  c.text = std::move(reply.text);
  c.tokens = std::move(reply.tokens);
  c.logprobs = std::move(reply.logprobs);
  c.top_logprobs = std::move(reply.top_logprobs);
  c.end = g->forced_end.value_or(reply.end);
  if (g->error && !r->result.error) r->result.error = g->error;
  RequestEvent e;
  e.kind = RequestEvent::Kind::kChoiceEnd;
  e.choice = g->choice;
  e.end = c.end;
  r->channel->push(std::move(e));
  if (++r->ended < r->replies.size()) return;

  Usage& u = r->result.usage;
  for (const Choice& each : r->result.choices) u.completion_tokens += static_cast<int64_t>(each.tokens.size());
  const std::shared_ptr<Generation>& first = r->replies.front();
  u.prompt_tokens = static_cast<int64_t>(r->prompt.size()) + static_cast<int64_t>(first->header.size());
  auto s = sessions.find(r->sessions.front());
  if (s != sessions.end()) u.cached_tokens = std::min(u.prompt_tokens, s->second.stats.prefix_hit_tokens);
  requests.erase(r->id);
  // Closed between steps: this may run inside a driver callback.
  scheduler->post([this, ids = r->sessions] {
    for (int64_t id : ids) close_session(id);
  });
  for (const std::shared_ptr<Generation>& each : r->replies) each->request.reset();  // no cycle through the replies
  end_request(*r);
}

RequestHandle::~RequestHandle() {
  // Nobody can read it any more: a request still running ends.
  std::unique_lock<std::mutex> lock(channel_->mutex);
  const bool over = channel_->result.has_value();
  lock.unlock();
  if (!over) cancel();
}

void RequestHandle::accepted() {
  std::unique_lock<std::mutex> lock(channel_->mutex);
  channel_->changed.wait(lock, [&] { return channel_->accepted; });
  if (channel_->refused) std::rethrow_exception(channel_->refused);
}

std::optional<RequestEvent> RequestHandle::next(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(channel_->mutex);
  auto ready = [&] { return !channel_->events.empty() || channel_->done_taken; };
  if (wait == std::chrono::milliseconds::max()) {
    channel_->changed.wait(lock, ready);
  } else if (!channel_->changed.wait_for(lock, wait, ready)) {
    return std::nullopt;
  }
  if (channel_->events.empty()) return std::nullopt;  // after kDone
  const bool was_full = channel_->events.size() >= channel_->capacity;
  RequestEvent e = std::move(channel_->events.front());
  channel_->events.pop_front();
  if (e.kind == RequestEvent::Kind::kDone) channel_->done_taken = true;
  lock.unlock();
  if (was_full) wake_engine();  // its request was paused: the engine thread may step it again
  return e;
}

RequestResult RequestHandle::wait() {
  while (next()) {
  }
  std::lock_guard<std::mutex> lock(channel_->mutex);
  if (channel_->result->error) std::rethrow_exception(channel_->result->error);
  return *channel_->result;
}

std::optional<RequestResult> RequestHandle::result() const {
  std::lock_guard<std::mutex> lock(channel_->mutex);
  return channel_->result;
}

void RequestHandle::cancel() {
  try {
    core_->scheduler->post([core = core_, id = id_] { core->cancel_request(id); });
  } catch (const SessionClosedError&) {
    // The runtime is gone: it ended the request already.
  }
}

void RequestHandle::wake_engine() {
  try {
    core_->scheduler->post([] {});  // a command: the engine thread asks has_work() again
  } catch (const SessionClosedError&) {
  }
}

}  // namespace lorakv::agents
