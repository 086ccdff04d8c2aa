// tests/agents/core/scheduler_test.cpp: the engine thread (agents/scheduler.h) against a fake
// step source: commands from many threads run one at a time on the engine thread and never
// during a step, blocking calls from the engine thread are refused, failures of a step reach
// every job, and stop() refuses later work. The fake is deliberately not thread-safe: under
// ThreadSanitizer (`make tsan`) any access from a second thread is reported.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "lorakv/agents/scheduler.h"

namespace lorakv::agents {
namespace {

// Jobs that need a number of steps each; every step advances every job by one and calls its
// callback (on the engine thread, as token callbacks are).
class FakeSteps : public StepSource {
 public:
  struct Job {
    int remaining = 0;
    std::promise<int> done;  // the step count at which it finished
    std::function<void()> on_step;
  };

  int add(int steps, std::function<void()> on_step, std::future<int>& done) {
    record_thread();
    EXPECT_FALSE(in_step_) << "a command ran during a step";
    Job& job = jobs_[next_];
    job.remaining = steps;
    job.on_step = std::move(on_step);
    done = job.done.get_future();
    return next_++;
  }
  bool cancel(int id) {
    record_thread();
    EXPECT_FALSE(in_step_) << "a command ran during a step";
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return false;
    it->second.done.set_exception(std::make_exception_ptr(std::runtime_error("cancelled")));
    jobs_.erase(it);
    return true;
  }
  void fail_next_step() { fail_next_ = true; }

  bool has_work() override { return !jobs_.empty(); }
  void step() override {
    record_thread();
    in_step_ = true;
    ++steps_;
    if (fail_next_) {
      fail_next_ = false;
      in_step_ = false;
      throw std::runtime_error("the step failed");
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.on_step) it->second.on_step();
      if (--it->second.remaining > 0) {
        ++it;
        continue;
      }
      it->second.done.set_value(steps_);
      it = jobs_.erase(it);
    }
    in_step_ = false;
  }
  void fail_all(std::exception_ptr error) override {
    for (auto& [id, job] : jobs_) job.done.set_exception(error);
    jobs_.clear();
  }

  int64_t steps() const { return steps_; }
  std::vector<std::thread::id> threads() const { return threads_; }

 private:
  void record_thread() {
    const std::thread::id me = std::this_thread::get_id();
    if (threads_.empty() || threads_.back() != me) threads_.push_back(me);
  }

  std::map<int, Job> jobs_;
  int next_ = 0;
  int64_t steps_ = 0;
  bool in_step_ = false;
  bool fail_next_ = false;
  std::vector<std::thread::id> threads_;  // every thread that touched the fake, in order
};

TEST(Scheduler, CommandsFromManyThreadsRunOnTheEngineThreadOnly) {
  FakeSteps fake;
  Scheduler scheduler(fake);
  constexpr int kThreads = 6, kJobsPerThread = 25;
  std::atomic<int> finished{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      for (int j = 0; j < kJobsPerThread; ++j) {
        std::future<int> done;
        const int steps = 1 + (t + j) % 4;
        const int64_t before = scheduler.call([&] { return fake.steps(); }, "steps");
        scheduler.call([&] { return fake.add(steps, nullptr, done); }, "add");
        const int finished_at = done.get();
        EXPECT_GE(finished_at - before, steps) << "a job finished before its steps ran";
        ++finished;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(finished.load(), kThreads * kJobsPerThread);
  scheduler.stop();
  const std::vector<std::thread::id> threads = fake.threads();
  ASSERT_EQ(threads.size(), 1u) << "the fake was touched from more than the engine thread";
  EXPECT_NE(threads.front(), std::this_thread::get_id());
}

TEST(Scheduler, BlockingCallFromTheEngineThreadIsRefusedNotDeadlocked) {
  FakeSteps fake;
  Scheduler scheduler(fake);
  std::string refused;
  bool posted_ran = false;
  std::future<int> done;
  scheduler.call(
      [&] {
        return fake.add(1,
                        [&] {
                          try {
                            scheduler.call([] { return 0; }, "Session::generate");
                          } catch (const DeadlockError& e) {
                            refused = e.what();
                          }
                          scheduler.post([&] { posted_ran = true; });  // posting does not wait: allowed
                        },
                        done);
      },
      "add");
  done.get();
  scheduler.call([] { return 0; }, "flush");  // the posted command ran before this one
  EXPECT_NE(refused.find("Session::generate"), std::string::npos) << refused;
  EXPECT_TRUE(posted_ran);
}

TEST(Scheduler, CancelFromAnotherThreadEndsTheJob) {
  FakeSteps fake;
  Scheduler scheduler(fake);
  std::future<int> done;
  const int id = scheduler.call([&] { return fake.add(1 << 30, nullptr, done); }, "add");
  std::thread canceller([&] { EXPECT_TRUE(scheduler.call([&] { return fake.cancel(id); }, "cancel")); });
  canceller.join();
  EXPECT_THROW(done.get(), std::runtime_error);
  EXPECT_FALSE(scheduler.call([&] { return fake.has_work(); }, "has_work"));
}

TEST(Scheduler, FailedStepFailsEveryJobAndTheLoopGoesOn) {
  FakeSteps fake;
  Scheduler scheduler(fake);
  std::future<int> a, b, c;
  scheduler.call(
      [&] {
        fake.add(5, nullptr, a);
        fake.add(7, nullptr, b);
        fake.fail_next_step();
        return 0;
      },
      "add two and fail");
  EXPECT_THROW(a.get(), std::runtime_error);
  EXPECT_THROW(b.get(), std::runtime_error);
  scheduler.call([&] { return fake.add(2, nullptr, c); }, "add after the failure");
  EXPECT_GT(c.get(), 0);
}

TEST(Scheduler, ExceptionOfACallReachesTheCaller) {
  FakeSteps fake;
  Scheduler scheduler(fake);
  EXPECT_THROW(scheduler.call([]() -> int { throw SessionClosedError("gone"); }, "x"), SessionClosedError);
  EXPECT_EQ(scheduler.call([] { return 42; }, "y"), 42);  // still serving
}

TEST(Scheduler, StopRunsWhatWasQueuedThenRefusesMore) {
  FakeSteps fake;
  auto scheduler = std::make_unique<Scheduler>(fake);
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) scheduler->post([&] { ++ran; });
  scheduler->stop();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_THROW(scheduler->post([] {}), SessionClosedError);
  EXPECT_THROW(scheduler->call([] { return 0; }, "late"), SessionClosedError);
  scheduler->stop();  // idempotent
}

// A source with nothing to step but a deadline ahead (a call waiting for admission with a
// timeout) is asked again once the deadline passes, with no command arriving to wake it.
class DeadlineSource : public StepSource {
 public:
  explicit DeadlineSource(std::chrono::steady_clock::time_point at) : at_(at) {}
  bool has_work() override {
    if (!fired_.load() && std::chrono::steady_clock::now() >= at_) {
      fired_ = true;
      fired_promise_.set_value();
    }
    return false;
  }
  void step() override {}
  void fail_all(std::exception_ptr) override {}
  std::optional<std::chrono::steady_clock::time_point> next_deadline() override {
    if (fired_.load()) return std::nullopt;
    return at_;
  }
  std::future<void> fired() { return fired_promise_.get_future(); }

 private:
  std::chrono::steady_clock::time_point at_;
  std::atomic<bool> fired_{false};
  std::promise<void> fired_promise_;
};

TEST(Scheduler, IdleLoopWakesAtTheSourcesDeadline) {
  DeadlineSource source(std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  std::future<void> fired = source.fired();
  Scheduler scheduler(source);
  scheduler.post([] {});  // one pass of the loop, then it idles until the deadline
  EXPECT_EQ(fired.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  scheduler.stop();
}

}  // namespace
}  // namespace lorakv::agents
