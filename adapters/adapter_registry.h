// adapters/adapter_registry.h: the adapters loaded on one base model, by name: load,
// replace and unload at run time, list them, report their memory, and find adapters
// that share a bitwise-equal A for a module (the cache's base_lr_shared groups).
//
// Thread safety: every method may be called from any thread at any time. Loading reads
// files outside the lock, then publishes under it. Pinning: `acquire` hands out a
// shared_ptr; while any copy of it lives (a running sequence holds one), `unload` of that
// adapter refuses with kInUse and nothing changes. The check is exact: the registry's
// copy is the only one not reachable through an earlier acquire, and acquire takes the
// same lock. `load(..., replace)` may replace a pinned adapter: running sequences keep
// the old one until they finish; new acquires get the new one. Identities are content
// hashes: two names loaded from the same files have one identity (and may share cached
// rows), and a replacement with the same content keeps it.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/adapters/adapter_loader.h"

namespace lorakv::adapters {

struct AdapterInfo {
  std::string name;
  std::string source;
  AdapterFormat format = AdapterFormat::kPeft;
  int64_t min_rank = 0, max_rank = 0;
  std::vector<std::string> targets;  // "q_proj", ...
  int64_t num_modules = 0;           // adapted (layer, projection) pairs
  int64_t num_bytes = 0;
  AdapterIdentity identity;
  bool in_use = false;               // pinned by someone at the time of the call
};

enum class UnloadStatus { kUnloaded, kNotFound, kInUse };
struct UnloadResult {
  UnloadStatus status = UnloadStatus::kNotFound;
  std::string message;  // says what happened, for users
};

// Adapters whose A for one (layer, projection) is bitwise equal. Groups are per (layer,
// projection): a group here says nothing about the adapters' other modules.
struct SharedAGroup {
  int64_t layer = 0;
  ModuleId module = ModuleId::kQ;
  AdapterIdentity identity;           // the members' LoraModule::a_hash; ContentKey::residual takes it
  std::vector<std::string> adapters;  // names, sorted; two or more
};

class AdapterRegistry {
 public:
  AdapterRegistry(BaseModelShape shape, at::ScalarType dtype);

  // Loads `path` (PEFT directory or GGUF LoRA file) as `name`. Throws AdapterLoadError
  // for a bad file and ConfigError when `name` exists and `replace` is false or the name
  // is empty. Returns the new adapter (not pinned by the return value beyond its life).
  std::shared_ptr<const Adapter> load(const std::string& name, const std::string& path, bool replace = false);
  // Adds an adapter built elsewhere (tests, other formats); same rules as load.
  std::shared_ptr<const Adapter> add(std::shared_ptr<const Adapter> adapter, bool replace = false);

  UnloadResult unload(const std::string& name);

  // Pins and returns the adapter, or nullptr when no adapter has that name.
  std::shared_ptr<const Adapter> acquire(const std::string& name) const;
  // As acquire, but throws ConfigError listing the loaded names when absent.
  std::shared_ptr<const Adapter> require(const std::string& name) const;

  std::vector<AdapterInfo> list() const;  // sorted by name
  size_t size() const;
  int64_t num_bytes() const;              // every loaded adapter's A and B bytes
  std::vector<SharedAGroup> shared_a_groups() const;

  const BaseModelShape& base_shape() const { return shape_; }
  at::ScalarType dtype() const { return dtype_; }

 private:
  const BaseModelShape shape_;
  const at::ScalarType dtype_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Adapter>> adapters_;  // guarded by mutex_
};

}  // namespace lorakv::adapters
