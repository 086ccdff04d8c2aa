// cli/interrupts.cpp: the SIGINT counter and its watcher thread.
#include "lorakv/cli/interrupts.h"

#include <chrono>

namespace lorakv::cli {
namespace {

// Written by the handler only; lock-free, as a handler requires.
std::atomic<int> g_interrupts{0};
static_assert(std::atomic<int>::is_always_lock_free);

void count_interrupt(int) {
  const int n = g_interrupts.fetch_add(1) + 1;
  if (n >= 2) std::signal(SIGINT, SIG_DFL);  // the next one kills
}

// How often the watcher looks at the count: short against a person's reaction, long
// against the cost of waking up.
constexpr std::chrono::milliseconds kPollInterval{50};

}  // namespace

InterruptWatch::InterruptWatch(std::function<void(int count)> on_interrupt) : on_interrupt_(std::move(on_interrupt)) {
  g_interrupts.store(0);
  struct sigaction action {};
  action.sa_handler = count_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocked read of the next input line returns
  sigaction(SIGINT, &action, &previous_);
  watcher_ = std::thread([this] { watch(); });
}

InterruptWatch::~InterruptWatch() {
  stop_.store(true);
  watcher_.join();
  sigaction(SIGINT, &previous_, nullptr);
}

int InterruptWatch::count() const { return g_interrupts.load(); }

void InterruptWatch::watch() {
  int seen = 0;
  while (!stop_.load()) {
    std::this_thread::sleep_for(kPollInterval);
    for (const int now = g_interrupts.load(); seen < now;) on_interrupt_(++seen);
  }
}

}  // namespace lorakv::cli
