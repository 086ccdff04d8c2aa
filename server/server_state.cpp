// server/server_state.cpp: the running requests' registry.
#include "lorakv/server/server_state.h"

namespace lorakv::server {

void ServerState::attach(std::shared_ptr<agents::Runtime> runtime, ServedModels models) {
  runtime_ = std::move(runtime);
  models_ = std::move(models);
  ready_.store(true);  // publishes runtime_ and models_ to the handlers' threads
}

std::optional<int64_t> ServerState::take_slot() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (static_cast<int64_t>(running_.size()) >= options_.limits.max_running_requests) return std::nullopt;
  const int64_t slot = next_slot_++;
  running_[slot] = {};
  return slot;
}

void ServerState::track(int64_t slot, std::weak_ptr<agents::RequestHandle> handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_[slot] = std::move(handle);
}

void ServerState::release_slot(int64_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_.erase(slot);
}

int64_t ServerState::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(running_.size());
}

void ServerState::cancel_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [slot, weak] : running_) {
    if (auto handle = weak.lock()) handle->cancel();
  }
}

}  // namespace lorakv::server
