// server/server_state.h: what the HTTP handlers share: the options, the runtime once it is
// loaded, the served models, the requests running (for the limit and for shutdown) and
// the counters /metrics reports. Internal to the server layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "lorakv/agents/runtime.h"
#include "lorakv/server/request_mapping.h"
#include "lorakv/server/server_options.h"

namespace lorakv::server {

struct ServerCounters {
  std::atomic<int64_t> requests{0};           // answered with a 2xx status
  std::atomic<int64_t> failed_requests{0};    // answered with an error status
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> cached_tokens{0};
  std::atomic<int64_t> completion_tokens{0};
  std::atomic<int64_t> disconnects{0};        // requests cancelled because their client left
};

class ServerState {
 public:
  explicit ServerState(ServerOptions options) : options_(std::move(options)) {}

  const ServerOptions& options() const { return options_; }
  // Set once, before ready: the runtime and the models it serves.
  void attach(std::shared_ptr<agents::Runtime> runtime, ServedModels models);
  bool ready() const { return ready_.load(); }
  bool stopping() const { return stopping_.load(); }
  void begin_stopping() { stopping_.store(true); }
  agents::Runtime& runtime() const { return *runtime_; }
  const ServedModels& models() const { return models_; }
  ServerCounters& counters() { return counters_; }

  // A running request's place: taken before it is submitted (nullopt when the server runs
  // max_running_requests already), given back when its response ends.
  std::optional<int64_t> take_slot();
  void track(int64_t slot, std::weak_ptr<agents::RequestHandle> handle);
  void release_slot(int64_t slot);
  int64_t running() const;
  // Cancels every request running (shutdown past its grace).
  void cancel_all();

 private:
  ServerOptions options_;
  std::shared_ptr<agents::Runtime> runtime_;
  ServedModels models_;
  std::atomic<bool> ready_{false}, stopping_{false};
  ServerCounters counters_;
  mutable std::mutex mutex_;
  std::map<int64_t, std::weak_ptr<agents::RequestHandle>> running_;
  int64_t next_slot_ = 1;
};

// Releases a slot when the last owner lets go (the handler, then the response's stream).
class RunningSlot {
 public:
  RunningSlot(std::shared_ptr<ServerState> state, int64_t slot) : state_(std::move(state)), slot_(slot) {}
  ~RunningSlot() { state_->release_slot(slot_); }
  RunningSlot(const RunningSlot&) = delete;
  RunningSlot& operator=(const RunningSlot&) = delete;
  int64_t id() const { return slot_; }

 private:
  std::shared_ptr<ServerState> state_;
  int64_t slot_;
};

}  // namespace lorakv::server
