// agents/tools.h: tools an agent's action can call, registered by name. A tool is a
// function from an argument string to an output string; the registry turns its failures
// into output text, so a workflow can always append the result as a `tool` turn.
//
//   ToolRegistry tools;
//   tools.add({"calculator", "a op b, op in + - *", calculate});
//   tools.add({"weather", "the weather in a city", fetch_weather, std::chrono::seconds(2)});
//   ToolResult r = tools.call("weather", "Gramfal");  // r.text, r.status, r.seconds
//
// Deadlines: a tool with a deadline runs on a thread of its own, detached. Past the
// deadline the caller stops waiting and gets a timeout; the abandoned call runs on until
// its function returns, and its result is then discarded. A detached thread is chosen over
// a worker kept per tool because a function that never returns would block every later
// call queued behind it on that worker; the price is one thread per call with a deadline,
// and that the function's captures must stay valid while an abandoned call may still run
// (capture by value or shared_ptr, as the built-in lookup does). A tool without a
// deadline runs on the calling thread.
//
// Threading: add, call and the other methods may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv::agents {

struct Tool {
  std::string name;         // what actions and workflows call it by
  std::string description;  // for people and prompts: what it does with its argument
  std::function<std::string(const std::string& argument)> function;
  std::chrono::milliseconds deadline{0};  // 0: wait as long as it takes
};

enum class ToolStatus {
  kOk,           // the function returned its output
  kError,        // it threw: text is "Error: " and the exception's message
  kTimeout,      // past its deadline: text says so; the call's own result is discarded
  kUnknownTool,  // no tool of that name
};
const char* tool_status_name(ToolStatus status);  // "ok", "error", "timeout", "unknown_tool"

struct ToolResult {
  std::string text;  // what a workflow appends as the tool's turn
  ToolStatus status = ToolStatus::kOk;
  double seconds = 0;  // from the call to its result (or to the deadline)
};

// A tool that cannot be registered: no name, a name taken, no function.
class ToolError : public Error {
 public:
  explicit ToolError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kTool, "tool error", message, std::move(context)) {}
};

class ToolRegistry {
 public:
  ToolRegistry() = default;
  // Copies and moves take the other registry's lock (tools are values: name, function...).
  ToolRegistry(const ToolRegistry& other);
  ToolRegistry(ToolRegistry&& other) noexcept;
  ToolRegistry& operator=(const ToolRegistry& other);
  ToolRegistry& operator=(ToolRegistry&& other) noexcept;

  // Throws ToolError for an empty name, a name already registered, or an empty function.
  void add(Tool tool);
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // One line per tool, "name: description", sorted by name (for a system prompt).
  std::string describe() const;

  // Runs the tool on the argument. Never throws for the tool's own failures: they come back
  // as the result's text and status (see ToolStatus).
  ToolResult call(const std::string& name, const std::string& argument) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Tool> tools_;
};

}  // namespace lorakv::agents
