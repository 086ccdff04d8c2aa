// agents/tools.cpp: the tool registry: calls, failures as text, deadlines on detached threads.
#include "lorakv/agents/tools.h"

#include <condition_variable>
#include <exception>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>

namespace lorakv::agents {
namespace {

using Clock = std::chrono::steady_clock;
using ToolFunction = std::function<std::string(const std::string&)>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The function's output, or its exception as the output text.
ToolResult run_function(const ToolFunction& function, const std::string& argument) {
  ToolResult result;
  try {
    result.text = function(argument);
  } catch (const std::exception& e) {
    result.text = std::string("Error: ") + e.what();
    result.status = ToolStatus::kError;
  } catch (...) {
    result.text = "Error: the tool threw a non-standard exception.";
    result.status = ToolStatus::kError;
  }
  return result;
}

// What a call's own thread hands its caller. Shared, so an abandoned call can finish
// after its caller has gone: its result then lands here and is dropped with it.
struct PendingCall {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  ToolResult result;
};

ToolResult run_with_deadline(const Tool& tool, const std::string& argument) {
  auto pending = std::make_shared<PendingCall>();
  std::thread([pending, function = tool.function, argument] {
    ToolResult result = run_function(function, argument);
    std::lock_guard<std::mutex> lock(pending->mutex);
    pending->result = std::move(result);
    pending->done = true;
    pending->finished.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(pending->mutex);
  if (pending->finished.wait_for(lock, tool.deadline, [&] { return pending->done; })) {
    return std::move(pending->result);
  }
  ToolResult timeout;
  timeout.status = ToolStatus::kTimeout;
  timeout.text = "Error: tool '" + tool.name + "' timed out after " + std::to_string(tool.deadline.count()) + " ms.";
  return timeout;
}

}  // namespace

const char* tool_status_name(ToolStatus status) {
  switch (status) {
    case ToolStatus::kOk:
      return "ok";
    case ToolStatus::kError:
      return "error";
    case ToolStatus::kTimeout:
      return "timeout";
    case ToolStatus::kUnknownTool:
      return "unknown_tool";
  }
  return "?";
}

ToolRegistry::ToolRegistry(const ToolRegistry& other) {
  std::lock_guard<std::mutex> lock(other.mutex_);
  tools_ = other.tools_;
}

ToolRegistry::ToolRegistry(ToolRegistry&& other) noexcept {
  std::lock_guard<std::mutex> lock(other.mutex_);
  tools_ = std::move(other.tools_);
}

ToolRegistry& ToolRegistry::operator=(const ToolRegistry& other) {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  tools_ = other.tools_;
  return *this;
}

ToolRegistry& ToolRegistry::operator=(ToolRegistry&& other) noexcept {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  tools_ = std::move(other.tools_);
  return *this;
}

void ToolRegistry::add(Tool tool) {
  if (tool.name.empty()) throw ToolError("a tool needs a name", {"", "name"});
  if (!tool.function) throw ToolError("a tool needs a function", {"", tool.name});
  if (tool.deadline.count() < 0) throw ToolError("a tool's deadline must be 0 (none) or more", {"", tool.name});
  std::lock_guard<std::mutex> lock(mutex_);
  if (tools_.count(tool.name) != 0) {
    throw ToolError("a tool of this name is registered already", {"", tool.name, "", "", "pick another name"});
  }
  std::string name = tool.name;
  tools_.emplace(std::move(name), std::move(tool));
}

bool ToolRegistry::has(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tools_.count(name) != 0;
}

std::vector<std::string> ToolRegistry::names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& entry : tools_) out.push_back(entry.first);
  return out;
}

std::string ToolRegistry::describe() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  for (const auto& entry : tools_) os << entry.first << ": " << entry.second.description << "\n";
  return os.str();
}

ToolResult ToolRegistry::call(const std::string& name, const std::string& argument) const {
  const Clock::time_point start = Clock::now();
  Tool tool;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = tools_.find(name);
    if (it == tools_.end()) {
      return {"Error: unknown tool '" + name + "'.", ToolStatus::kUnknownTool, seconds_since(start)};
    }
    tool = it->second;  // a copy: the call runs without the lock
  }
  ToolResult result =
      tool.deadline.count() > 0 ? run_with_deadline(tool, argument) : run_function(tool.function, argument);
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace lorakv::agents
