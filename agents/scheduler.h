// agents/scheduler.h: the engine thread. One thread owns the engine and runs, in a loop,
// the commands other threads queue (open a session, append, start a generation, cancel)
// and then one step of the work in flight (every running agent's next token in every
// session, context chunks under the step's token budget). Callers wait on futures; token
// callbacks run on the engine thread. Written against StepSource, not the engine, so its
// thread safety is tested under ThreadSanitizer with a fake source (no libtorch).
//
// Contract: post() and call() may be called from any thread at any time until stop().
// Commands run one at a time, in the order they were queued, never during a step.
// call() from the engine thread itself (a command or a token callback) throws
// DeadlockError: it would wait for the thread that is running it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>

#include "lorakv/agents/errors.h"

namespace lorakv::agents {

// The work the engine thread steps between commands. Every method runs on the engine thread.
class StepSource {
 public:
  virtual ~StepSource() = default;
  virtual bool has_work() = 0;
  // One step. A failure that belongs to one job is that job's; what escapes is handed to
  // fail_all (the step was rolled back; no job can be blamed).
  virtual void step() = 0;
  virtual void fail_all(std::exception_ptr error) = 0;
  // When has_work() is false: the next time it should be asked again without a command
  // arriving (a waiting call's deadline); none: only when a command arrives.
  virtual std::optional<std::chrono::steady_clock::time_point> next_deadline() { return std::nullopt; }
};

class Scheduler {
 public:
  explicit Scheduler(StepSource& source);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues `command` for the engine thread and returns at once. An exception it throws is
  // logged. Throws SessionClosedError after stop().
  void post(std::function<void()> command);

  // Runs `command` on the engine thread and waits: returns its result or rethrows its
  // exception. `what` names the call in errors ("Session::generate").
  template <class F>
  auto call(F command, const std::string& what) -> std::invoke_result_t<F> {
    using R = std::invoke_result_t<F>;
    refuse_on_engine_thread(what);
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(command));
    std::future<R> done = task->get_future();
    post([task] { (*task)(); });
    return done.get();
  }

  bool on_engine_thread() const { return std::this_thread::get_id() == thread_id_; }
  // Runs the commands queued so far, then stops the thread (work still in flight stays
  // unfinished: stop the source's jobs first). Idempotent.
  void stop();

 private:
  void refuse_on_engine_thread(const std::string& what) const;
  void loop();
  void wait_for_command(std::unique_lock<std::mutex>& lock);  // until a command, stop, or the source's deadline

  StepSource& source_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> commands_;  // guarded by mutex_
  bool stopping_ = false;                       // guarded by mutex_
  bool started_ = false;                        // guarded by mutex_: thread_id_ is set
  std::thread::id thread_id_;                   // set once, before the loop runs anything
  std::thread thread_;
};

}  // namespace lorakv::agents
