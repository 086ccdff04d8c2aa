// common/errors.h: the typed errors lorakv throws for bad user input (files, configs,
// adapters), and the check macros used at op boundaries. The cache layer returns capacity
// outcomes as values (std::nullopt / false, see cache/), and Engine::step reports work the
// pools cannot take now as deferred (StepResult::admissions). Callers that cannot go on
// turn a shortfall into runtime::CapacityError (runtime/engine.h): the driver when a step
// admits nothing, a restore of saved rows that do not fit, generate() when a reply's rows
// cannot join their context; the sessions API reports it as agents::SessionCapacityError.
// One catch sits at the CLI's main.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace lorakv {

// Where a user-facing error came from and what would fix it. Every field is optional;
// `what()` joins the non-empty ones into one readable message.
struct ErrorContext {
  std::string file;      // path of the offending file, if any
  std::string key;       // metadata key, tensor name, config key...
  std::string expected;  // what lorakv needed
  std::string found;     // what it found instead
  std::string hint;      // how the user can fix it
};

// What kind of failure an Error is, for a caller that maps failures to statuses (a
// server's HTTP status, a binding's exception type). Each Error class has one code; the
// names (error_code_name) are stable: never reused or renamed.
enum class ErrorCode {
  kConfig,           // "config_error": a bad option or configuration value
  kUsage,            // "usage_error": a bad command line
  kInvalidArgument,  // "invalid_argument": a value an op cannot take
  kModelLoad,        // "model_load_error"
  kAdapterLoad,      // "adapter_load_error"
  kTokenizer,        // "tokenizer_error"
  kCapacity,         // "capacity_exceeded": the KV pools cannot hold the work even alone
  kContextLength,    // "context_length_exceeded": longer than the model's context
  kUnknownAgent,     // "unknown_agent"
  kUnknownAdapter,   // "unknown_adapter"
  kSessionClosed,    // "session_closed": the session or its runtime is gone
  kAgentBusy,        // "agent_busy"
  kDeadlock,         // "deadlock": a blocking call from the engine thread
  kOverloaded,       // "overloaded": the admission queue is full, or a call waited too long
  kSessionFile,      // "session_file_error"
  kTool,             // "tool_error"
  kCalculation,      // "calculation_error"
  kDocumentStore,    // "document_store_error"
  kSystem,           // "system_error": the operating system refused (a file, a process)
  kInternal,         // "internal_error": a lorakv bug
};
const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  // kind: the label what() starts with ("config error"); empty: none.
  Error(ErrorCode code, const std::string& kind, const std::string& message, ErrorContext context = {});
  ErrorCode code() const { return code_; }
  const ErrorContext& context() const { return context_; }
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_;
  ErrorContext context_;
  std::string message_;
};

// A model file (GGUF, safetensors, config) that cannot be loaded.
class ModelLoadError : public Error {
 public:
  explicit ModelLoadError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kModelLoad, "model load error", message, std::move(context)) {}
};

// A LoRA adapter (PEFT directory, GGUF LoRA file) that cannot be loaded or does not fit
// the base model.
class AdapterLoadError : public Error {
 public:
  explicit AdapterLoadError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kAdapterLoad, "adapter load error", message, std::move(context)) {}
};

// A tokenizer vocabulary or text that cannot be handled.
class TokenizerError : public Error {
 public:
  explicit TokenizerError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kTokenizer, "tokenizer error", message, std::move(context)) {}
};

// A bad command line or configuration value.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kConfig, "config error", message, std::move(context)) {}

 protected:
  // For a narrower kind of bad value with its own code and label (the CLI's UsageError).
  ConfigError(ErrorCode code, const std::string& kind, const std::string& message, ErrorContext context)
      : Error(code, kind, message, std::move(context)) {}
};

// A value a lorakv op cannot take, from its caller: a tensor of the wrong shape or dtype,
// rows outside the batch, a request the cache's current state does not allow. Raised at
// op boundaries (kernels/, cache/); the CLI checks its own flags first, as ConfigErrors.
class InvalidArgumentError : public Error {
 public:
  explicit InvalidArgumentError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kInvalidArgument, "invalid argument", message, std::move(context)) {}
};

// An internal invariant broke: a bug in lorakv, not bad input. An Error (code kInternal),
// so a caller maps every failure; code that turns Errors into user-facing ones (a config
// key, a session file) lets it pass unchanged.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(ErrorCode::kInternal, "", message) {}
};

namespace detail {
[[noreturn]] void throw_internal(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace lorakv

// Internal assertion: a failed one is a lorakv bug. Always on (cheap); use
// LORAKV_DEBUG_ASSERT inside hot loops.
#define LORAKV_ASSERT(cond, ...)                                                        \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::ostringstream lorakv_assert_os_;                                             \
      lorakv_assert_os_ << "" __VA_ARGS__;                                              \
      ::lorakv::detail::throw_internal(#cond, __FILE__, __LINE__, lorakv_assert_os_.str()); \
    }                                                                                   \
  } while (0)

// Input check at an op boundary: throws `ErrorType` (an Error subclass taking a message)
// with the streamed message when `cond` is false, e.g.
//   LORAKV_CHECK(x.dim() == 2, InvalidArgumentError, "lora_add: x must be [T, in], got " << x.sizes());
#define LORAKV_CHECK(cond, ErrorType, ...)     \
  do {                                         \
    if (!(cond)) {                             \
      std::ostringstream lorakv_check_os_;     \
      lorakv_check_os_ << __VA_ARGS__;         \
      throw ErrorType(lorakv_check_os_.str()); \
    }                                          \
  } while (0)

#ifdef NDEBUG
#define LORAKV_DEBUG_ASSERT(cond, ...) \
  do {                                 \
  } while (0)
#else
#define LORAKV_DEBUG_ASSERT(cond, ...) LORAKV_ASSERT(cond, __VA_ARGS__)
#endif
