// common/errors.cpp: message formatting for lorakv's typed errors.
#include "lorakv/common/errors.h"

namespace lorakv {
namespace {

std::string format_message(const std::string& kind, const std::string& message, const ErrorContext& c) {
  std::ostringstream os;
  os << kind;
  if (!c.file.empty()) os << " in '" << c.file << "'";
  if (!kind.empty() || !c.file.empty()) os << ": ";
  os << message;
  if (!c.key.empty()) os << " [" << c.key << "]";
  if (!c.expected.empty()) os << "; expected " << c.expected;
  if (!c.found.empty()) os << ", found " << c.found;
  if (!c.hint.empty()) os << " (hint: " << c.hint << ")";
  return os.str();
}

}  // namespace

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kConfig: return "config_error";
    case ErrorCode::kUsage: return "usage_error";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kModelLoad: return "model_load_error";
    case ErrorCode::kAdapterLoad: return "adapter_load_error";
    case ErrorCode::kTokenizer: return "tokenizer_error";
    case ErrorCode::kCapacity: return "capacity_exceeded";
    case ErrorCode::kContextLength: return "context_length_exceeded";
    case ErrorCode::kUnknownAgent: return "unknown_agent";
    case ErrorCode::kUnknownAdapter: return "unknown_adapter";
    case ErrorCode::kSessionClosed: return "session_closed";
    case ErrorCode::kAgentBusy: return "agent_busy";
    case ErrorCode::kDeadlock: return "deadlock";
    case ErrorCode::kOverloaded: return "overloaded";
    case ErrorCode::kSessionFile: return "session_file_error";
    case ErrorCode::kTool: return "tool_error";
    case ErrorCode::kCalculation: return "calculation_error";
    case ErrorCode::kDocumentStore: return "document_store_error";
    case ErrorCode::kSystem: return "system_error";
    case ErrorCode::kInternal: return "internal_error";
  }
  return "internal_error";
}

Error::Error(ErrorCode code, const std::string& kind, const std::string& message, ErrorContext context)
    : std::runtime_error(format_message(kind, message, context)),
      code_(code),
      context_(std::move(context)),
      message_(message) {}

namespace detail {
void throw_internal(const char* cond, const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << "lorakv internal error: " << cond << " failed at " << file << ":" << line;
  if (!msg.empty()) os << ": " << msg;
  throw InternalError(os.str());
}
}  // namespace detail

}  // namespace lorakv
