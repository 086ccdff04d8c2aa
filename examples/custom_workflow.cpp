// examples/custom_workflow.cpp: a workflow of one's own over the public Session API: a
// planner and an actor take turns, the actor's actions call registered tools (one custom),
// and every turn streams as it is written.
//   custom_workflow <model.gguf> <role adapter folder: planner/, actor/>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include "lorakv/agents/actions.h"
#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/observed_session.h"
#include "lorakv/agents/runtime.h"
using namespace lorakv::agents;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: custom_workflow <model.gguf> <role adapter folder>\n");
    return 2;
  }
  try {
    RuntimeOptions options;
    options.model = argv[1];
    Runtime runtime(options);
    std::shared_ptr<Session> session = runtime.open_session();
    for (const std::string role : {"planner", "actor"}) {
      runtime.load_adapter(role, std::string(argv[2]) + "/" + role);
      session->add_agent({role, role, ""});
    }
    // The custom tool: any function from the argument to the output text, here a directory.
    const std::map<std::string, std::string> people = {{"Dok Gramein", "Dok Gramein: born 1914, lives in Gramfal."}};
    ToolRegistry tools;
    tools.add({"directory", "a person's record by name", [people](const std::string& name) {
                 auto it = people.find(name);
                 return it == people.end() ? std::string("No document found.") : it->second;
               }, std::chrono::seconds(1)});
    tools.add(calculator_tool());
    WorkflowObserver print;
    print.on_append = [](auto& role, auto& text) { std::printf("%s: %s\n", role.c_str(), text.c_str()); };
    print.on_turn_start = [](auto& agent) { std::printf("%s: ", agent.c_str()); };
    print.on_text = [](auto&, auto& piece) { std::printf("%s", piece.c_str()); };  // on the engine thread
    print.on_turn_end = [](auto&, auto&) { std::printf("\n"); };
    ObservedSession s(*session, print);
    s.append("system", "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].");
    s.append("user", "How old was Dok Gramein in 1940?");
    WorkflowAgent planner{"planner", {}}, actor{"actor", {}};  // default GenerateOptions: greedy
    for (int round = 0; round < 4 && !s.result().answer; ++round) {
      s.generate(planner);
      const Action action = parse_action(s.generate(actor).text);
      if (action.kind == Action::Kind::kFinish) s.result().answer = action.argument;
      if (action.kind == Action::Kind::kInvalid) s.append("tool", "Error: unknown action.");
      const char* tool = action.name == "Lookup" ? "directory" : "calculator";
      if (action.kind == Action::Kind::kTool) s.call_tool(tools, tool, action.argument);
    }
    std::printf("answer: %s (%zu turns)\n", s.result().answer.value_or("none").c_str(), s.result().turns.size());
    return 0;
  } catch (const lorakv::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
