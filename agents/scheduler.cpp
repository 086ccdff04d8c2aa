// agents/scheduler.cpp: the engine thread's loop: commands, then one step.
#include "lorakv/agents/scheduler.h"

#include <string>
#include <utility>

#include "lorakv/common/logging.h"

namespace lorakv::agents {

Scheduler::Scheduler(StepSource& source) : source_(source) {
  thread_ = std::thread([this] { loop(); });
  std::lock_guard<std::mutex> lock(mutex_);
  thread_id_ = thread_.get_id();
  started_ = true;
  wake_.notify_all();
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::post(std::function<void()> command) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw SessionClosedError("the runtime has shut down", {"", "", "", "", "open a new Runtime"});
    commands_.push_back(std::move(command));
  }
  wake_.notify_all();
}

void Scheduler::refuse_on_engine_thread(const std::string& what) const {
  if (!on_engine_thread()) return;
  throw DeadlockError(what + " was called on the engine thread (from a token callback) and would wait for itself",
                      {"", what, "", "", "call it from another thread, or return false from the callback to stop"});
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && !on_engine_thread()) thread_.join();
}

void Scheduler::wait_for_command(std::unique_lock<std::mutex>& lock) {
  const auto ready = [this] { return stopping_ || !commands_.empty(); };
  std::optional<std::chrono::steady_clock::time_point> deadline;
  try {
    deadline = source_.next_deadline();
  } catch (const std::exception& e) {
    log::error(std::string("the step source failed: ") + e.what());
  }
  if (deadline) {
    wake_.wait_until(lock, *deadline, ready);
  } else {
    wake_.wait(lock, ready);
  }
}

void Scheduler::loop() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [this] { return started_; });
  }
  bool has_work = false;
  while (true) {
    std::deque<std::function<void()>> commands;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!has_work) wait_for_command(lock);
      commands.swap(commands_);
      stopping = stopping_;
    }
    for (std::function<void()>& command : commands) {
      try {
        command();
      } catch (const std::exception& e) {
        log::error(std::string("a queued command failed: ") + e.what());
      }
    }
    if (stopping && commands.empty()) return;
    try {
      if (source_.has_work()) source_.step();
    } catch (...) {
      // Not one job's fault (a job's own failure stays inside step()): every job ends with it.
      try {
        source_.fail_all(std::current_exception());
      } catch (const std::exception& e) {
        log::error(std::string("failing the jobs in flight failed: ") + e.what());
      }
    }
    try {
      has_work = source_.has_work();
    } catch (const std::exception& e) {
      log::error(std::string("the step source failed: ") + e.what());
      has_work = false;
    }
  }
}

}  // namespace lorakv::agents
