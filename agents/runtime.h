// agents/runtime.h: what agent orchestration code links: one base model, its adapters, one
// engine with its KV pools, and the engine thread that batches every session's work
// (agents/scheduler.h). Open sessions (agents/session.h) on it from any thread.
//
//   lorakv::agents::RuntimeOptions options;
//   options.model = "SmolLM2-135M-Instruct.Q4_1.gguf";
//   lorakv::agents::Runtime rt(options);
//   rt.load_adapter("planner", "assets/role_adapters/all_linear/planner");
//   auto s = rt.open_session({});
//   s->add_agent({"planner", "planner"});
//   s->append("user", "How old was Dok Gramein in 1940?");
//   lorakv::agents::Reply r = s->generate("planner");
//
// Threading: every method may be called from any thread. Sessions may outlive their
// Runtime: destroying it closes every session (their later calls throw SessionClosedError)
// and stops the engine thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/agents/request.h"
#include "lorakv/agents/session.h"
#include "lorakv/agents/session_types.h"

namespace lorakv::agents {

class Runtime {
 public:
  // Loads the model and starts the engine thread. Throws ModelLoadError, ConfigError.
  explicit Runtime(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Loads a PEFT directory or GGUF LoRA file as `name` (AdapterLoadError, ConfigError when
  // the name is taken).
  void load_adapter(const std::string& name, const std::string& path);
  // Adds an adapter built in memory, under its own name (same rules as load_adapter).
  void add_adapter(std::shared_ptr<const adapters::Adapter> adapter);
  // Unloads it; its memory goes. Throws UnknownAdapterError, or ConfigError while an agent
  // is bound to it (remove the agent first).
  void unload_adapter(const std::string& name);
  std::vector<std::string> adapters() const;

  std::shared_ptr<Session> open_session(const SessionOptions& options = {});
  // A session saved by Session::save, in this process or another: its trajectory, rows,
  // options and agents (their adapters must be loaded under the same names, with the same
  // content). Rows the cache holds already by prefix are shared, not copied. Throws
  // SessionFileError (truncated or corrupt file, another model or adapter, an unknown format
  // version), UnknownAdapterError, SessionCapacityError.
  std::shared_ptr<Session> restore_session(const std::string& path);

  // One request, read through its handle on the caller's thread (agents/request.h). Checks
  // the options here (ConfigError: bad rules, both or neither of messages and prompt, n out
  // of 1..16); the engine thread's refusals arrive through RequestHandle::accepted().
  std::shared_ptr<RequestHandle> submit(RequestOptions request);

  RuntimeStats stats() const;
  const RuntimeOptions& options() const;
  // The model's tokenizer (immutable while the runtime lives): token pieces for
  // log-probabilities, counts for limits.
  const formats::BpeTokenizer& tokenizer() const;
  // The model's context: the most positions one trajectory (with its replies) may hold.
  int64_t context_length() const;

 private:
  std::shared_ptr<RuntimeCore> core_;
};

}  // namespace lorakv::agents
