// agents/runtime.cpp: the runtime's core (model, adapters, engine, driver, engine thread)
// and the Runtime's methods, each run on the engine thread.
#include "lorakv/agents/runtime.h"

#include <ATen/Parallel.h>

#include "lorakv/agents/runtime_core.h"
#include "lorakv/agents/session_file.h"
#include "lorakv/common/errors.h"

namespace lorakv::agents {

const char* reply_end_name(ReplyEnd end) {
  switch (end) {
    case ReplyEnd::kEndOfTurn: return "end_of_turn";
    case ReplyEnd::kStopString: return "stop_string";
    case ReplyEnd::kLength: return "length";
    case ReplyEnd::kCallback: return "callback";
    case ReplyEnd::kCancelled: return "cancelled";
    case ReplyEnd::kDeadline: return "deadline";
    case ReplyEnd::kStalled: return "stalled";
  }
  return "unknown";
}

namespace {

void check_options(const RuntimeOptions& o) {
  auto positive = [](int64_t value, const char* key) {
    if (value <= 0) throw ConfigError(std::string(key) + " must be positive", {"", key, "> 0", std::to_string(value)});
  };
  if (o.model.empty()) throw ConfigError("no model given", {"", "model", "a GGUF file or an HF checkpoint directory"});
  positive(o.kv_pool_bytes, "kv_pool_bytes");
  positive(o.block_size, "block_size");
  positive(o.prefill_chunk, "prefill_chunk");
  if (o.step_token_budget < 0) throw ConfigError("step_token_budget must be 0 (no limit) or more", {"", "step_token_budget"});
  if (o.threads < 0) throw ConfigError("threads must be 0 (libtorch's default) or more", {"", "threads"});
  if (o.max_waiting_calls < 0) throw ConfigError("max_waiting_calls must be 0 or more", {"", "max_waiting_calls"});
  if (o.max_admission_wait.count() < 0) {
    throw ConfigError("max_admission_wait must be 0 (no limit) or more", {"", "max_admission_wait"});
  }
}


}  // namespace

void check_session_options(const SessionOptions& options) {
  if (options.max_tokens_per_step < 0) {
    throw ConfigError("max_tokens_per_step must be 0 (no cap) or more", {"", "max_tokens_per_step"});
  }
  if (options.reserve_tokens < 0 || options.reserve_reply_tokens < 0) {
    throw ConfigError("reserve_tokens and reserve_reply_tokens must be 0 or more", {"", "reserve_tokens"});
  }
}

runtime::EngineOptions engine_options(const RuntimeOptions& o) {
  runtime::EngineOptions e;
  e.kv_pool_bytes = o.kv_pool_bytes;
  e.residual_rows_per_base_row = o.residual_rows_per_base_row;
  e.block_size = o.block_size;
  e.prefill_chunk = o.prefill_chunk;
  if (!o.kv_dtype.empty()) e.kv_dtype = runtime::parse_kv_dtype(o.kv_dtype, "kv_dtype");
  e.rerotate = o.rerotate;
  e.per_head_token_sets = o.per_head_token_sets;
  if (!o.residual_dtype.empty()) e.residual_dtype = runtime::parse_kv_dtype(o.residual_dtype, "residual_dtype");
  return e;
}

RuntimeCore::RuntimeCore(RuntimeOptions o) : options(std::move(o)) {
  check_options(options);
  if (options.threads > 0) at::set_num_threads(options.threads);
  loaded = runtime::load_model(options.model, runtime::parse_model_dtype(options.dtype));
  if (!loaded.tokenizer) {
    throw ConfigError("sessions need the model's tokenizer", {options.model, "tokenizer", "", "none",
                                                             "use a GGUF file, or an HF directory with tokenizer.json"});
  }
  registry = std::make_unique<adapters::AdapterRegistry>(loaded.model->adapter_shape(), loaded.model->dtype());
  layout = std::make_unique<ChatLayout>(*loaded.tokenizer);
  engine = std::make_unique<runtime::Engine>(*loaded.model, engine_options(options));
  driver = std::make_unique<runtime::Driver>(*engine, nullptr, runtime::DriverOptions{options.step_token_budget});
  scheduler = std::make_unique<Scheduler>(*this);
}

RuntimeCore::~RuntimeCore() {
  if (scheduler) scheduler->stop();  // before anything the engine thread reads goes
}

SessionState& RuntimeCore::session(int64_t id, const std::string& call) {
  auto it = sessions.find(id);
  if (it == sessions.end()) {
    throw SessionClosedError("session " + std::to_string(id) + " is closed", {"", call, "", "", "open a new session"});
  }
  return it->second;
}

AgentState& RuntimeCore::agent(SessionState& s, int64_t id, const std::string& name) {
  auto it = s.agents.find(name);
  if (it != s.agents.end()) return it->second;
  std::string names;
  for (const auto& [n, a] : s.agents) names += (names.empty() ? "" : ", ") + n;
  throw UnknownAgentError("session " + std::to_string(id) + " has no agent " + name,
                          {"", name, names.empty() ? "no agents yet" : "one of: " + names, "", "add it with add_agent"});
}

std::string RuntimeCore::loaded_adapters() const {
  std::string names;
  for (const adapters::AdapterInfo& info : registry->list()) names += (names.empty() ? "" : ", ") + info.name;
  return names.empty() ? "none loaded" : "one of: " + names;
}

const std::string& RuntimeCore::model_identity() {
  if (model_sha256.empty()) model_sha256 = model_files_sha256(options.model);
  return model_sha256;
}

void RuntimeCore::close_session(int64_t id) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  end_waiting(id, ReplyEnd::kCancelled);
  end_in_flight(it->second, ReplyEnd::kCancelled);
  engine->release_context(it->second.context);
  release_reservation(it->second);
  sessions.erase(id);
  admit_waiting();
}

Runtime::Runtime(RuntimeOptions options) : core_(std::make_shared<RuntimeCore>(std::move(options))) {}

Runtime::~Runtime() {
  try {
    core_->scheduler->call(
        [core = core_.get()] {
          while (!core->sessions.empty()) core->close_session(core->sessions.begin()->first);
        },
        "Runtime::~Runtime");
  } catch (const std::exception&) {
    // Stopped already, or called on the engine thread: nothing more can be closed safely.
  }
  core_->scheduler->stop();
}

void Runtime::load_adapter(const std::string& name, const std::string& path) {
  core_->registry->load(name, path);  // the registry is thread-safe; parsing stays off the engine thread
}

void Runtime::add_adapter(std::shared_ptr<const adapters::Adapter> adapter) { core_->registry->add(std::move(adapter)); }

void Runtime::unload_adapter(const std::string& name) {
  const adapters::UnloadResult result = core_->registry->unload(name);
  if (result.status == adapters::UnloadStatus::kNotFound) {
    throw UnknownAdapterError("no adapter " + name, {"", name, core_->loaded_adapters()});
  }
  if (result.status == adapters::UnloadStatus::kInUse) {
    throw ConfigError(result.message, {"", name, "", "", "remove the agents bound to it first"});
  }
  // Decode batches keep stacked factors across steps; drop them so the memory goes now.
  core_->loaded.model->forget_adapter_stacks();
}

std::vector<std::string> Runtime::adapters() const {
  std::vector<std::string> names;
  for (const adapters::AdapterInfo& info : core_->registry->list()) names.push_back(info.name);
  return names;
}

std::shared_ptr<Session> Runtime::open_session(const SessionOptions& options) {
  check_session_options(options);
  const int64_t id = core_->scheduler->call(
      [core = core_.get(), &options] {
        SessionState s;
        s.options = options;
        s.context = core->engine->create_context({options.mode, options.writer, options.eviction}, {});
        const int64_t session_id = core->next_session++;
        core->sessions.emplace(session_id, std::move(s));
        return session_id;
      },
      "Runtime::open_session");
  return std::shared_ptr<Session>(new Session(core_, id));
}

std::shared_ptr<Session> Runtime::restore_session(const std::string& path) {
  const SessionFile saved = read_session(path);  // off the engine thread: reading and checksums
  const int64_t id = core_->scheduler->call(
      [core = core_.get(), &saved, &path] {
        if (saved.model_sha256 != core->model_identity()) {
          throw SessionFileError("the session was saved with another model",
                                 {path, "model_sha256", core->model_identity(), saved.model_sha256,
                                  "restore it into a runtime of the model it was saved with"});
        }
        std::vector<std::shared_ptr<const adapters::Adapter>> readers;
        for (const SavedAgent& a : saved.agents) {
          std::shared_ptr<const adapters::Adapter> adapter;
          if (!a.options.adapter.empty()) {
            adapter = core->registry->acquire(a.options.adapter);
            if (!adapter) {
              throw UnknownAdapterError("the session's agent " + a.options.name + " needs adapter " + a.options.adapter,
                                        {path, a.options.adapter, core->loaded_adapters(), "", "load it first"});
            }
          }
          const AdapterIdentity have = adapter ? adapter->identity() : AdapterIdentity::base_model();
          if (have != a.adapter) {
            throw SessionFileError("adapter " + a.options.adapter + " is not the one the session was saved with",
                                   {path, "agents." + a.options.name, a.adapter.hex(), have.hex(),
                                    "load the adapter files the session was saved with"});
          }
          readers.push_back(adapter);
        }
        SessionState s;
        s.options = saved.options;
        s.context = core->engine->import_context(saved.rows, readers);
        for (size_t i = 0; i < saved.agents.size(); ++i) {
          const SavedAgent& a = saved.agents[i];
          s.agents[a.options.name] = AgentState{a.options, {s.context, static_cast<int32_t>(i)}, a.adapter, false};
        }
        const int64_t session_id = core->next_session++;
        core->sessions.emplace(session_id, std::move(s));
        return session_id;
      },
      "Runtime::restore_session");
  return std::shared_ptr<Session>(new Session(core_, id));
}

RuntimeStats Runtime::stats() const {
  return core_->scheduler->call(
      [core = core_.get()] {
        RuntimeStats r;
        const runtime::EngineMemory m = core->engine->memory();
        r.sessions = static_cast<int64_t>(core->sessions.size());
        r.kv_bytes_in_use = m.cache.bytes_in_use;
        r.kv_bytes_peak = m.cache.peak_bytes_in_use;
        r.kv_bytes_capacity = m.cache.reserved_bytes;
        r.kv_base_bytes = m.cache.base_k_bytes + m.cache.base_v_bytes;
        r.kv_residual_bytes = m.cache.residual_bytes_total;
        r.kv_cached_bytes = m.cache.cached_bytes;
        r.base_row_bytes = runtime::Engine::base_row_bytes(*core->loaded.model, core->engine->options());
        r.adapter_bytes = core->registry->num_bytes();
        r.driver = core->driver->stats();
        r.committed_tokens_processed_again = core->engine->committed_tokens_processed_again();
        for (const auto& [id, session] : core->sessions) r.replies_in_flight += static_cast<int64_t>(session.in_flight.size());
        r.open_requests = static_cast<int64_t>(core->requests.size());
        r.kv_dtype = runtime::kv_dtype_name(runtime::Engine::base_kv_dtype(*core->loaded.model, core->engine->options()));
        r.admitted_sessions = core->admitted_sessions;
        r.peak_admitted_sessions = core->peak_admitted_sessions;
        r.waiting_calls = static_cast<int64_t>(core->waiting.size());
        return r;
      },
      "Runtime::stats");
}

const RuntimeOptions& Runtime::options() const { return core_->options; }

const formats::BpeTokenizer& Runtime::tokenizer() const { return core_->layout->tokenizer(); }

int64_t Runtime::context_length() const { return core_->loaded.model->config().context_length; }

}  // namespace lorakv::agents
