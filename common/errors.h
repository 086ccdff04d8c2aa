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

class Error : public std::runtime_error {
 public:
  Error(const std::string& kind, const std::string& message, ErrorContext context = {});
  const ErrorContext& context() const { return context_; }
  const std::string& message() const { return message_; }

 private:
  ErrorContext context_;
  std::string message_;
};

// A model file (GGUF, safetensors, config) that cannot be loaded.
class ModelLoadError : public Error {
 public:
  explicit ModelLoadError(const std::string& message, ErrorContext context = {})
      : Error("model load error", message, std::move(context)) {}
};

// A LoRA adapter (PEFT directory, GGUF LoRA file) that cannot be loaded or does not fit
// the base model.
class AdapterLoadError : public Error {
 public:
  explicit AdapterLoadError(const std::string& message, ErrorContext context = {})
      : Error("adapter load error", message, std::move(context)) {}
};

// A tokenizer vocabulary or text that cannot be handled.
class TokenizerError : public Error {
 public:
  explicit TokenizerError(const std::string& message, ErrorContext context = {})
      : Error("tokenizer error", message, std::move(context)) {}
};

// A bad command line or configuration value.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message, ErrorContext context = {})
      : Error("config error", message, std::move(context)) {}

 protected:
  // For a narrower kind of bad value with its own label (the CLI's UsageError).
  ConfigError(const std::string& kind, const std::string& message, ErrorContext context)
      : Error(kind, message, std::move(context)) {}
};

// A value a lorakv op cannot take, from its caller: a tensor of the wrong shape or dtype,
// rows outside the batch, a request the cache's current state does not allow. Raised at
// op boundaries (kernels/, cache/); the CLI checks its own flags first, as ConfigErrors.
class InvalidArgumentError : public Error {
 public:
  explicit InvalidArgumentError(const std::string& message, ErrorContext context = {})
      : Error("invalid argument", message, std::move(context)) {}
};

// An internal invariant broke: a bug in lorakv, not bad input.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
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
