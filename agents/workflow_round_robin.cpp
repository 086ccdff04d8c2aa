// agents/workflow_round_robin.cpp: run_round_robin, agents in turn for N rounds.
#include "lorakv/agents/observed_session.h"
#include "lorakv/agents/workflows.h"

namespace lorakv::agents {

WorkflowResult run_round_robin(Session& session, const RoundRobinSpec& spec, const std::string& input,
                               const WorkflowObserver& observer) {
  require_agents(session, spec.agents);
  if (spec.agents.empty()) throw ConfigError("a round robin needs at least one agent", {"", "agents"});
  if (spec.rounds < 0) throw ConfigError("rounds must be 0 or more", {"", "rounds"});
  ObservedSession s(session, observer);
  s.append_system(spec.system);
  s.append("user", input);
  for (int round = 0; round < spec.rounds; ++round) {
    for (const WorkflowAgent& agent : spec.agents) {
      const Reply reply = s.generate(agent);
      if (!reply.appended) return std::move(s.result());
      s.result().answer = reply.text;
    }
    ++s.result().steps;
  }
  return std::move(s.result());
}

}  // namespace lorakv::agents
