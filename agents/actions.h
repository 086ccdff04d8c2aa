// agents/actions.h: an actor's action text (`Lookup[Dok Gramein]`, `Calculate[1940 - 1914]`,
// `Finish[26]`) read as tools/agentic_qa/common.parse_action reads it:
//   re.match(r"^(Lookup|Calculate|Finish)\[(.*)\]$", text.strip(), re.S)
// The whole stripped text must be one action word, '[', anything (newlines and brackets
// too), and a final ']'. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace lorakv::agents {

struct Action {
  enum class Kind { kTool, kFinish, kInvalid };
  Kind kind = Kind::kInvalid;
  std::string name;      // the action word as written ("Lookup"); empty when invalid
  std::string argument;  // between the brackets, as written (not stripped)
};

// `tool_actions` are the words that call a tool; `finish` ends the episode. With the
// defaults this accepts exactly what parse_action does.
Action parse_action(const std::string& text, const std::vector<std::string>& tool_actions = {"Lookup", "Calculate"},
                    const std::string& finish = "Finish");

}  // namespace lorakv::agents
