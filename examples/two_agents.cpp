// examples/two_agents.cpp: two agents with role adapters take turns on one trajectory.
//   two_agents <model.gguf> <role adapter folder: planner/, actor/>
#include <cstdio>
#include <string>

#include "lorakv/agents/runtime.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/version.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: two_agents <model.gguf> <role adapter folder>\n");
    return 2;
  }
  try {
    lorakv::agents::RuntimeOptions options;
    options.model = argv[1];
    lorakv::agents::Runtime runtime(options);
    std::shared_ptr<lorakv::agents::Session> session = runtime.open_session();
    for (const std::string role : {"planner", "actor"}) {
      runtime.load_adapter(role, std::string(argv[2]) + "/" + role);
      session->add_agent({role, role, ""});  // turn name, adapter, no private instruction
    }
    session->append("system", "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].");
    session->append("user", "How old was Dok Gramein in 1940?");
    std::printf("lorakv %s\n", lorakv::version());
    for (const char* agent : {"planner", "actor"}) {
      std::printf("%s: %s\n", agent, session->generate(agent).text.c_str());
    }
    const lorakv::agents::SessionStats s = session->stats();
    std::printf("tokens: %lld in the trajectory, %lld generated; KV bytes: %lld; %.1f tokens/s\n",
                (long long)s.trajectory_tokens, (long long)s.tokens_generated, (long long)s.own_kv_bytes,
                s.decode_tokens_per_second);
    return 0;
  } catch (const lorakv::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
