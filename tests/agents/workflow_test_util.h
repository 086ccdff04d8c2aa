// tests/agents/workflow_test_util.h: the workflow tests' runtime (the real model with the
// qv_shared_a role adapters, loaded once for every workflow test) and sessions with the
// three role agents on it.
#pragma once

#include <memory>
#include <string>

#include "lorakv/agents/runtime.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::agents::testing {

inline const char* const kRoles[] = {"planner", "actor", "reflector"};

// Adapters "qv.planner", "qv.actor", "qv.reflector"; kept until the process ends.
inline Runtime& qv_shared_runtime() {
  static std::unique_ptr<Runtime> runtime = [] {
    auto rt = std::make_unique<Runtime>(real_model_options());
    for (const char* role : kRoles) rt->load_adapter(std::string("qv.") + role, role_adapter_path("qv_shared_a", role));
    return rt;
  }();
  return *runtime;
}

// A session with agents planner, actor and reflector, each on its qv_shared_a adapter.
inline std::shared_ptr<Session> qv_role_session(SessionOptions options = {}) {
  std::shared_ptr<Session> session = qv_shared_runtime().open_session(options);
  for (const char* role : kRoles) session->add_agent({role, std::string("qv.") + role, ""});
  return session;
}

// The trajectory as text: every turn "<|im_start|>{role}\n{text}<|im_end|>\n" (common.render).
inline std::string render_turns(const std::vector<std::pair<std::string, std::string>>& turns) {
  std::string out;
  for (const auto& turn : turns) out += "<|im_start|>" + turn.first + "\n" + turn.second + "<|im_end|>\n";
  return out;
}

}  // namespace lorakv::agents::testing
