// agents/admission.cpp: whole-session admission (SessionOptions::reserve_tokens). A session
// with a reservation runs only once the pools can hold its rows for the tokens it declared,
// beside every other admitted session's reservation; its generate calls wait until then,
// first come first served. Reservations count whole blocks per lane, the pools' own unit.
#include <algorithm>

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

Reservation RuntimeCore::reservation_for(const SessionState& s) const {
  const int64_t block_size = engine->options().block_size;
  const int64_t trajectory = blocks_for(s.options.reserve_tokens, block_size);
  const runtime::ContextFootprint f = engine->context_footprint(s.context);
  Reservation r;
  // Private rows (instruction, header, reply) are a reader's own until commit, in every mode.
  r.base_blocks = f.base_row_sets * trajectory +
                  static_cast<int64_t>(s.agents.size()) * blocks_for(s.options.reserve_reply_tokens, block_size);
  for (const auto& [rank, streams] : f.residual_streams_by_rank) r.residual_blocks[rank] = streams * trajectory;
  return r;
}

Reservation RuntimeCore::capacity_for(const Reservation& wanted) const {
  const runtime::EngineOptions& o = engine->options();
  Reservation c;
  c.base_blocks = blocks_for(o.base_rows, o.block_size);
  // Every rank's residual pool has the same rows (EngineOptions::residual_rows).
  for (const auto& [rank, blocks] : wanted.residual_blocks) c.residual_blocks[rank] = blocks_for(o.residual_rows, o.block_size);
  return c;
}

bool RuntimeCore::try_admit(SessionState& s) {
  const Reservation wanted = reservation_for(s);
  if (!fits(reserved_total, wanted, capacity_for(wanted))) return false;
  s.reserved = wanted;
  s.admitted = true;
  add_to(reserved_total, wanted, +1);
  ++admitted_sessions;
  peak_admitted_sessions = std::max(peak_admitted_sessions, admitted_sessions);
  return true;
}

void RuntimeCore::submit(WaitingStart call) {
  SessionState& s = session(call.session, "Session::generate");
  const bool needs_admission = s.options.reserve_tokens > 0 && !s.admitted;
  if (needs_admission) {
    const Reservation wanted = reservation_for(s);
    const Reservation capacity = capacity_for(wanted);
    if (!fits(Reservation{}, wanted, capacity)) {
      throw SessionCapacityError(
          "the session's reservation does not fit in the pools even alone",
          {"", "reserve_tokens", describe(capacity), describe(wanted),
           "reserve fewer tokens, use a sharing mode that stores less, or give the runtime a larger kv_pool_bytes"});
    }
    // First come first served: a session does not pass one that waits before it.
    if (!waiting.empty() || !try_admit(s)) {
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
    } else if (it->second.admitted || try_admit(it->second)) {
      try {
        start(call.session, call.agents, call.options, call.started, call.alone, call.group);
      } catch (...) {
        fail_unstarted(call, std::current_exception());
      }
    } else {
      return;
    }
    waiting.pop_front();
  }
}

void RuntimeCore::update_reservation(SessionState& s) {
  if (!s.admitted) return;
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
  auto late = [now](const WaitingStart& w) { return w.options.timeout.count() > 0 && now >= w.started + w.options.timeout; };
  if (std::none_of(waiting.begin(), waiting.end(), late)) return;
  for (WaitingStart& call : waiting) {
    if (late(call)) resolve_unstarted(call, ReplyEnd::kDeadline);
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
