// adapters/adapter_registry.cpp: the registry's bookkeeping under one mutex.
#include "lorakv/adapters/adapter_registry.h"

#include <algorithm>
#include <tuple>

#include "lorakv/common/errors.h"

namespace lorakv::adapters {

AdapterRegistry::AdapterRegistry(BaseModelShape shape, at::ScalarType dtype) : shape_(std::move(shape)), dtype_(dtype) {}

std::shared_ptr<const Adapter> AdapterRegistry::load(const std::string& name, const std::string& path, bool replace) {
  if (name.empty()) throw ConfigError("an adapter needs a name", {path, "name", "a non-empty name", "\"\"", ""});
  if (!replace && acquire(name) != nullptr) {  // fail fast before reading the file; add() re-checks
    throw ConfigError("an adapter with this name is already loaded",
                      {path, name, "a new name, or replace", "'" + name + "' in use", "unload it first or ask to replace"});
  }
  return add(load_adapter(name, path, shape_, {dtype_}), replace);
}

std::shared_ptr<const Adapter> AdapterRegistry::add(std::shared_ptr<const Adapter> adapter, bool replace) {
  LORAKV_ASSERT(adapter != nullptr, "null adapter");
  if (adapter->dtype() != dtype_) {
    throw ConfigError("adapter dtype differs from the registry's", {adapter->source(), adapter->name(),
                      c10::toString(dtype_), c10::toString(adapter->dtype()), ""});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = adapters_.find(adapter->name());
  if (it != adapters_.end() && !replace) {
    throw ConfigError("an adapter with this name is already loaded", {adapter->source(), adapter->name(),
                      "a new name, or replace", "'" + adapter->name() + "' in use", "unload it first or ask to replace"});
  }
  adapters_[adapter->name()] = adapter;
  return adapter;
}

UnloadResult AdapterRegistry::unload(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = adapters_.find(name);
  if (it == adapters_.end()) return {UnloadStatus::kNotFound, "no adapter named '" + name + "' is loaded"};
  const long holders = it->second.use_count() - 1;
  if (holders > 0) {
    return {UnloadStatus::kInUse, "adapter '" + name + "' is in use by " + std::to_string(holders) +
                                      " running sequence(s) or handle(s); unload it when they finish"};
  }
  adapters_.erase(it);
  return {UnloadStatus::kUnloaded, "adapter '" + name + "' unloaded"};
}

std::shared_ptr<const Adapter> AdapterRegistry::acquire(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = adapters_.find(name);
  return it == adapters_.end() ? nullptr : it->second;
}

std::shared_ptr<const Adapter> AdapterRegistry::require(const std::string& name) const {
  std::shared_ptr<const Adapter> a = acquire(name);
  if (a == nullptr) {
    std::string names;
    for (const AdapterInfo& i : list()) names += (names.empty() ? "" : ", ") + i.name;
    throw ConfigError("no adapter with this name is loaded", {"", name, names.empty() ? "no adapters loaded" : names,
                                                              "'" + name + "'", "load it with --adapter NAME=PATH"});
  }
  return a;
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, a] : adapters_) {
    out.push_back({name, a->source(), a->format(), a->min_rank(), a->max_rank(), a->target_names(),
                   static_cast<int64_t>(a->modules().size()), a->num_bytes(), a->identity(), a.use_count() > 1});
  }
  return out;
}

size_t AdapterRegistry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return adapters_.size();
}

int64_t AdapterRegistry::num_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& [name, a] : adapters_) n += a->num_bytes();
  return n;
}

std::vector<SharedAGroup> AdapterRegistry::shared_a_groups() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // (layer, module, A's SHA-256) -> adapter names (sorted: adapters_ is a sorted map). The
  // digest covers A's bytes, dtype and shape, so equal digests are byte-equal A.
  std::map<std::tuple<int64_t, int, AdapterIdentity>, std::vector<std::string>> by_hash;
  for (const auto& [name, a] : adapters_) {
    for (const LoraModule& m : a->modules()) by_hash[{m.layer, static_cast<int>(m.module), m.a_hash}].push_back(name);
  }
  std::vector<SharedAGroup> out;
  for (auto& [key, names] : by_hash) {
    if (names.size() < 2) continue;
    out.push_back({std::get<0>(key), static_cast<ModuleId>(std::get<1>(key)), std::get<2>(key), std::move(names)});
  }
  return out;
}

}  // namespace lorakv::adapters
