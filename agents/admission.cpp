// agents/admission.cpp: admission. Every session holds a reservation of pool blocks
// beside the others', and no session's work starts unless its reservation covers it, so
// an admitted session always finds the rows it reserved free. A session with
// reserve_tokens reserves what it declared, once, before its first reply; any other
// session's reservation grows with each generate call to its trajectory plus the call's
// replies (never shrinking until it closes). A call whose session cannot grow waits, first
// come first served, for at most RuntimeOptions::max_admission_wait, in a queue of at
// most max_waiting_calls (OverloadedError past either). Reservations count whole blocks
// per lane, the pools' own unit.
#include <algorithm>

#include "lorakv/agents/errors.h"
#include "lorakv/agents/runtime_core.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents {

namespace {

int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

// "base pool: 40 blocks per lane" etc., for errors.
std::string describe(const Reservation& r) {
  std::string out = "base pool " + std::to_string(r.base_blocks) + " blocks per lane";
  for (const auto& [rank, blocks] : r.residual_blocks) {
    out += ", rank-" + std::to_string(rank) + " residual pool " + std::to_string(blocks) + " blocks per lane";
  }
  return out;
}

// Whether `held` plus `more` fits in `capacity`, pool by pool.
bool fits(const Reservation& held, const Reservation& more, const Reservation& capacity) {
  if (held.base_blocks + more.base_blocks > capacity.base_blocks) return false;
  for (const auto& [rank, blocks] : more.residual_blocks) {
    const auto have = held.residual_blocks.find(rank);
    const int64_t used = have == held.residual_blocks.end() ? 0 : have->second;  // capacity has every rank of `more`
    if (used + blocks > capacity.residual_blocks.at(rank)) return false;
  }
  return true;
}

void add_to(Reservation& total, const Reservation& r, int64_t sign) {
  total.base_blocks += sign * r.base_blocks;
  for (const auto& [rank, blocks] : r.residual_blocks) total.residual_blocks[rank] += sign * blocks;
}

}  // namespace

// A waiting call ends without running: its replies say why, nothing was appended.
void RuntimeCore::resolve_unstarted(WaitingStart& call, ReplyEnd end) {
  if (call.alone && call.alone->request) {
    call.alone->reply.end = end;
    call.alone->ended = true;
    return request_reply_ended(call.alone);
  }
  std::vector<Reply> replies;
  for (const std::string& agent : call.agents) {
    Reply r;
    r.agent = agent;
    r.end = end;
    replies.push_back(std::move(r));
  }
  if (call.group) {
    call.group->promise.set_value(std::move(replies));
  } else {
    call.alone->promise.set_value(std::move(replies.front()));
  }
}

void RuntimeCore::fail_unstarted(WaitingStart& call, std::exception_ptr error) {
  if (call.alone && call.alone->request) {
    call.alone->error = error;
    call.alone->ended = true;
    return request_reply_ended(call.alone);
  }
  if (call.group) {
    call.group->promise.set_exception(error);
  } else {
    call.alone->promise.set_exception(error);
  }
}

Reservation RuntimeCore::rows_for(const SessionState& s, int64_t trajectory_tokens, int64_t private_blocks) const {
  const int64_t trajectory = blocks_for(trajectory_tokens, engine->options().block_size);
  const runtime::ContextFootprint f = engine->context_footprint(s.context);
  Reservation r;
  // Private rows (instruction, header, reply) are a reader's own until commit, in every mode.
  r.base_blocks = f.base_row_sets * trajectory + private_blocks;
  for (const auto& [rank, streams] : f.residual_streams_by_rank) r.residual_blocks[rank] = streams * trajectory;
  return r;
}

Reservation RuntimeCore::reservation_for(const SessionState& s) const {
  const int64_t reply = blocks_for(s.options.reserve_reply_tokens, engine->options().block_size);
  return rows_for(s, s.options.reserve_tokens, static_cast<int64_t>(s.agents.size()) * reply);
}

Reservation RuntimeCore::demand_of(const SessionState& s, const WaitingStart& call) const {
  const int64_t block_size = engine->options().block_size;
  int64_t trajectory = static_cast<int64_t>(engine->context_tokens(s.context).size());
  int64_t private_blocks = 0;
  auto add_reply = [&](int64_t private_tokens) {  // committed, a reply joins the trajectory
    trajectory += private_tokens;
    private_blocks += blocks_for(private_tokens, block_size);
  };
  for (const std::shared_ptr<Generation>& g : s.in_flight) {
    add_reply(static_cast<int64_t>(g->suffix.size()) + g->decoder->rules().max_tokens);
  }
  for (const std::string& name : call.agents) {
    const auto a = s.agents.find(name);
    const int64_t instruction = a == s.agents.end() || a->second.options.instruction.empty()
                                    ? 0
                                    : static_cast<int64_t>(layout->turn("system", a->second.options.instruction).size());
    const int64_t header = call.alone && call.alone->raw_suffix ? static_cast<int64_t>(call.alone->raw_suffix->size())
                                                                : static_cast<int64_t>(layout->header(name).size());
    add_reply(instruction + header + std::max<int64_t>(call.options.max_tokens, 0));
  }
  // With a token budget the rows kept stay near it whatever the trajectory's length: the
  // budget, and one step's chunk before its eviction.
  const cache::eviction::EvictionConfig& e = s.options.eviction;
  if (e.enabled()) trajectory = std::min(trajectory, e.budget_rows(trajectory) + engine->options().prefill_chunk);
  return rows_for(s, trajectory, private_blocks);
}

Reservation RuntimeCore::capacity_for(const Reservation& wanted) const {
  const runtime::EngineOptions& o = engine->options();
  Reservation c;
  c.base_blocks = blocks_for(o.base_rows, o.block_size);
  // Every rank's residual pool has the same rows (EngineOptions::residual_rows).
  for (const auto& [rank, blocks] : wanted.residual_blocks) c.residual_blocks[rank] = blocks_for(o.residual_rows, o.block_size);
  return c;
}

bool RuntimeCore::try_hold(SessionState& s, const Reservation& wanted) {
  Reservation grown = s.reserved;  // a reservation only grows (per pool, the larger)
  grown.base_blocks = std::max(grown.base_blocks, wanted.base_blocks);
  for (const auto& [rank, blocks] : wanted.residual_blocks) {
    grown.residual_blocks[rank] = std::max(grown.residual_blocks[rank], blocks);
  }
  Reservation more = grown;
  add_to(more, s.reserved, -1);
  if (!fits(reserved_total, more, capacity_for(grown))) return false;
  add_to(reserved_total, more, +1);
  s.reserved = grown;
  if (!s.admitted) {
    s.admitted = true;
    ++admitted_sessions;
    peak_admitted_sessions = std::max(peak_admitted_sessions, admitted_sessions);
  }
  return true;
}

// What `call` needs held before it starts: a declared reservation once, else its demand.
std::optional<Reservation> RuntimeCore::still_needed(const SessionState& s, const WaitingStart& call) const {
  if (s.options.reserve_tokens > 0) {
    if (s.admitted) return std::nullopt;
    return reservation_for(s);
  }
  return demand_of(s, call);
}

void RuntimeCore::submit(WaitingStart call) {
  SessionState& s = session(call.session, "Session::generate");
  const std::optional<Reservation> wanted = still_needed(s, call);
  if (wanted) {
    const Reservation capacity = capacity_for(*wanted);
    if (!fits(Reservation{}, *wanted, capacity)) {
      const bool declared = s.options.reserve_tokens > 0;
      throw SessionCapacityError(
          declared ? "the session's reservation does not fit in the pools even alone"
                   : "the trajectory and this call's replies do not fit in the pools even alone",
          {"", declared ? "reserve_tokens" : "max_tokens", describe(capacity), describe(*wanted),
           declared ? "reserve fewer tokens, use a sharing mode that stores less, or give the runtime a larger kv_pool_bytes"
                    : "ask for fewer tokens, start a new session, use a sharing mode that stores less, or give the "
                      "runtime a larger kv_pool_bytes"});
    }
    // First come first served: a call does not pass one that waits before it.
    if (!waiting.empty() || !try_hold(s, *wanted)) {
      if (static_cast<int64_t>(waiting.size()) >= options.max_waiting_calls) {
        throw OverloadedError("too many calls wait for room in the pools",
                              {"", "max_waiting_calls", "at most " + std::to_string(options.max_waiting_calls) + " waiting",
                               std::to_string(waiting.size()) + " waiting", "try again later"});
      }
      waiting.push_back(std::move(call));
      return;
    }
  }
  start(call.session, call.agents, call.options, call.started, call.alone, call.group);
}

void RuntimeCore::admit_waiting() {
  while (!waiting.empty()) {
    WaitingStart& call = waiting.front();
    auto it = sessions.find(call.session);
    if (it == sessions.end()) {
      resolve_unstarted(call, ReplyEnd::kCancelled);  // closed while it waited
    } else {
      const std::optional<Reservation> wanted = still_needed(it->second, call);
      if (wanted && !try_hold(it->second, *wanted)) return;
      try {
        start(call.session, call.agents, call.options, call.started, call.alone, call.group);
      } catch (...) {
        fail_unstarted(call, std::current_exception());
      }
    }
    waiting.pop_front();
  }
}

void RuntimeCore::update_reservation(SessionState& s) {
  if (!s.admitted || s.options.reserve_tokens == 0) return;  // a grown reservation follows its calls
  add_to(reserved_total, s.reserved, -1);
  s.reserved = reservation_for(s);
  add_to(reserved_total, s.reserved, +1);
}

void RuntimeCore::release_reservation(SessionState& s) {
  if (!s.admitted) return;
  add_to(reserved_total, s.reserved, -1);
  s.reserved = {};
  s.admitted = false;
  --admitted_sessions;
}

void RuntimeCore::end_waiting(int64_t session, ReplyEnd end) {
  auto mine = [session](const WaitingStart& w) { return w.session == session; };
  for (WaitingStart& call : waiting) {
    if (mine(call)) resolve_unstarted(call, end);
  }
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(), mine), waiting.end());
}

void RuntimeCore::expire_waiting(Clock::time_point now) {
  auto deadline = [now](const WaitingStart& w) { return w.options.timeout.count() > 0 && now >= w.started + w.options.timeout; };
  auto waited_too_long = [&](const WaitingStart& w) {
    return options.max_admission_wait.count() > 0 && now >= w.started + options.max_admission_wait;
  };
  auto late = [&](const WaitingStart& w) { return deadline(w) || waited_too_long(w); };
  if (std::none_of(waiting.begin(), waiting.end(), late)) return;
  for (WaitingStart& call : waiting) {
    if (deadline(call)) {
      resolve_unstarted(call, ReplyEnd::kDeadline);
    } else if (waited_too_long(call)) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - call.started).count();
      fail_unstarted(call, std::make_exception_ptr(OverloadedError(
                               "the call waited too long for room in the pools",
                               {"", "max_admission_wait", "at most " + std::to_string(options.max_admission_wait.count()) + " ms",
                                std::to_string(waited) + " ms", "try again later, or close idle sessions"})));
    }
  }
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(), late), waiting.end());
  admit_waiting();  // the first in line may have been one of them
}

std::optional<Clock::time_point> RuntimeCore::next_deadline() {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point at) {
    if (!next || at < *next) next = at;
  };
  for (const WaitingStart& call : waiting) {
    if (call.options.timeout.count() > 0) consider(call.started + call.options.timeout);
    if (options.max_admission_wait.count() > 0) consider(call.started + options.max_admission_wait);
  }
  // Paused replies (no step runs them) still end at their deadline or when they stall.
  for (const auto& [id, s] : sessions) {
    for (const std::shared_ptr<Generation>& g : s.in_flight) {
      if (g->ended) continue;
      if (g->deadline) consider(*g->deadline);
      if (g->request) consider(g->paused_since.value_or(Clock::now()) + g->request->options.stall_timeout);
    }
  }
  return next;
}

}  // namespace lorakv::agents
