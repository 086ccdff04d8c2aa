// common/errors.cpp: message formatting for lorakv's typed errors.
#include "lorakv/common/errors.h"

namespace lorakv {
namespace {

std::string format_message(const std::string& kind, const std::string& message, const ErrorContext& c) {
  std::ostringstream os;
  os << kind;
  if (!c.file.empty()) os << " in '" << c.file << "'";
  os << ": " << message;
  if (!c.key.empty()) os << " [" << c.key << "]";
  if (!c.expected.empty()) os << "; expected " << c.expected;
  if (!c.found.empty()) os << ", found " << c.found;
  if (!c.hint.empty()) os << " (hint: " << c.hint << ")";
  return os.str();
}

}  // namespace

Error::Error(const std::string& kind, const std::string& message, ErrorContext context)
    : std::runtime_error(format_message(kind, message, context)),
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
