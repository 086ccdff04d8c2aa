// cli/interrupts.h: Ctrl-C for the commands that run a session (run, chat). The first
// SIGINT cancels the reply in flight, the next one ends the command, which still prints its
// summary and writes its transcript; after that, SIGINT's default action is back, so a
// third Ctrl-C kills a command that hangs.
//
// The signal handler only counts (all it may do); a watcher thread turns each new count
// into a call of `on_interrupt` on an ordinary thread, where Session::cancel is allowed.
#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

namespace lorakv::cli {

class InterruptWatch {
 public:
  // Installs the handler (without SA_RESTART, so a read blocked on the terminal returns)
  // and starts the watcher. `on_interrupt(count)` runs on the watcher for each SIGINT.
  explicit InterruptWatch(std::function<void(int count)> on_interrupt);
  ~InterruptWatch();  // stops the watcher and restores the previous handler
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  // SIGINTs since construction.
  int count() const;

 private:
  void watch();

  std::function<void(int)> on_interrupt_;
  struct sigaction previous_ {};
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace lorakv::cli
