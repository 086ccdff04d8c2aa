// agents/errors.h: the typed errors of the sessions API. Each names the thing it is about;
// a call that throws one leaves the session as it was.
#pragma once

#include <string>

#include "lorakv/common/errors.h"

namespace lorakv::agents {

// No agent of that name in the session.
class UnknownAgentError : public Error {
 public:
  explicit UnknownAgentError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kUnknownAgent, "unknown agent", message, std::move(context)) {}
};

// No adapter of that name in the runtime.
class UnknownAdapterError : public Error {
 public:
  explicit UnknownAdapterError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kUnknownAdapter, "unknown adapter", message, std::move(context)) {}
};

// The session was closed (or its runtime shut down).
class SessionClosedError : public Error {
 public:
  explicit SessionClosedError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kSessionClosed, "session closed", message, std::move(context)) {}
};

// A trajectory (with an agent's private tokens) longer than the model's context.
class ContextLengthError : public Error {
 public:
  explicit ContextLengthError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kContextLength, "over the model's context", message, std::move(context)) {}
};

// A blocking call made on the engine thread (from a token callback): it would wait for
// the thread that is running it.
class DeadlockError : public Error {
 public:
  explicit DeadlockError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kDeadlock, "would deadlock", message, std::move(context)) {}
};

// The agent is generating already; an agent has one reply in flight at a time.
class AgentBusyError : public Error {
 public:
  explicit AgentBusyError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kAgentBusy, "agent busy", message, std::move(context)) {}
};

// The KV pools cannot hold the work even when it runs alone.
class SessionCapacityError : public Error {
 public:
  explicit SessionCapacityError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kCapacity, "out of cache capacity", message, std::move(context)) {}
};

// Admission refused the call: the queue of calls waiting for room is full, or the call
// waited longer than RuntimeOptions::max_admission_wait. Nothing ran; try again later.
class OverloadedError : public Error {
 public:
  explicit OverloadedError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kOverloaded, "overloaded", message, std::move(context)) {}
};

// A session file that cannot be restored: truncated or corrupt (checksums), saved with
// another model or adapter, or of an unknown format version. Names the file and the field.
class SessionFileError : public Error {
 public:
  explicit SessionFileError(const std::string& message, ErrorContext context = {})
      : Error(ErrorCode::kSessionFile, "session file error", message, std::move(context)) {}
};

}  // namespace lorakv::agents
