// tests/agents/session_save_scenario.h: the session the save/restore tests save, built the
// same way in the test and in its helper process (tests/agents/tool/).
#pragma once

#include <memory>
#include <string>

#include "lorakv/agents/runtime.h"

namespace lorakv::agents::testing {

inline RuntimeOptions scenario_options(const std::string& model) {
  RuntimeOptions o;
  o.model = model;
  o.kv_pool_bytes = int64_t{128} << 20;
  return o;
}

// adapters: a role adapter set's folder (planner/, actor/).
inline void load_scenario_adapters(Runtime& rt, const std::string& adapters) {
  for (const char* role : {"planner", "actor"}) rt.load_adapter(role, adapters + "/" + role);
}

// The question asked, the planner's and the actor's first turns, a tool result appended.
inline std::shared_ptr<Session> scenario_session(Runtime& rt, SessionOptions options = {}) {
  auto s = rt.open_session(options);
  for (const char* role : {"planner", "actor"}) s->add_agent({role, role, ""});
  s->append("system", "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].");
  s->append("user", "How old was Dok Gramein in 1940?");
  GenerateOptions turn;
  turn.max_tokens = 24;
  (void)s->generate("planner", turn);
  (void)s->generate("actor", turn);
  s->append("tool", "Dok Gramein: born 1914, lives in Gramfal, works as weaver.");
  return s;
}

// The planner's next turn (8 greedy tokens, with log-probabilities).
inline Reply scenario_next_turn(Session& s) {
  GenerateOptions turn;
  turn.max_tokens = 8;
  turn.logprobs = true;
  return s.generate("planner", turn);
}

}  // namespace lorakv::agents::testing
