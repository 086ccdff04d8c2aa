// agents/actions.cpp: parse_action, as common.parse_action.
#include "lorakv/agents/actions.h"

#include "lorakv/agents/python_text.h"

namespace lorakv::agents {
namespace {

// `word[argument]` spanning the whole text: the argument, or false.
bool match_action(const std::string& text, const std::string& word, std::string& argument) {
  const size_t open = word.size();
  if (word.empty() || text.size() < open + 2 || text.compare(0, open, word) != 0) return false;
  if (text[open] != '[' || text.back() != ']') return false;
  argument = text.substr(open + 1, text.size() - open - 2);
  return true;
}

}  // namespace

Action parse_action(const std::string& text, const std::vector<std::string>& tool_actions, const std::string& finish) {
  const std::string stripped = python::strip(text);
  Action action;
  if (match_action(stripped, finish, action.argument)) {
    action.kind = Action::Kind::kFinish;
    action.name = finish;
    return action;
  }
  for (const std::string& word : tool_actions) {
    if (match_action(stripped, word, action.argument)) {
      action.kind = Action::Kind::kTool;
      action.name = word;
      return action;
    }
  }
  action.argument.clear();
  return action;
}

}  // namespace lorakv::agents
