// agents/request.h: one request through a Runtime, read on the caller's thread: what a
// server or a binding calls per API request. Runtime::submit hands the engine thread one
// command that opens the request's own session, binds the adapter, appends the messages
// (their content is plain text: a special-token spelling in it cannot open or end a turn)
// and starts the reply (or n replies, forked from one trajectory); the engine thread then
// queues token events that the caller takes with next().
//
//   lorakv::agents::RequestOptions r;
//   r.adapter = "planner";
//   r.messages = {{"user", "How old was Dok Gramein in 1940?"}};
//   auto handle = runtime.submit(r);
//   handle->accepted();  // throws the refusal (unknown adapter, too long, overloaded)
//   while (auto e = handle->next()) {
//     if (e->kind == lorakv::agents::RequestEvent::Kind::kToken) std::cout << e->token.text;
//   }
//   lorakv::agents::RequestResult result = handle->wait();  // usage, finish reasons
//
// Back-pressure: a reader that lets max_pending_events pile up pauses its own request (the
// engine steps everyone else); paused for stall_timeout, the request is cancelled
// (ReplyEnd::kStalled). A handle may outlive its Runtime: the runtime's end ends the
// request (kCancelled) and its events and result stay readable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/agents/session_types.h"
#include "lorakv/runtime/reply_decoder.h"

namespace lorakv::agents {

struct Message {
  std::string role;     // "system", "user", "tool", "assistant" or an agent's turn name
  std::string content;  // plain text
};

struct Usage {
  int64_t prompt_tokens = 0;      // the trajectory and the reply's header (of one reply)
  int64_t cached_tokens = 0;      // prompt tokens whose rows this request did not compute
  int64_t completion_tokens = 0;  // every reply's generated tokens
};

struct Choice {
  std::string text;              // stop strings and end tokens excluded; valid UTF-8
  std::vector<int32_t> tokens;   // a final end token included
  std::vector<double> logprobs;  // with logprobs
  std::vector<std::vector<runtime::TokenLogprob>> top_logprobs;  // with top_logprobs
  ReplyEnd end = ReplyEnd::kEndOfTurn;
};

struct RequestResult {
  std::vector<Choice> choices;  // one per reply, by index
  Usage usage;
  double time_to_first_token_s = 0;  // from submit to the first token of any reply
  std::exception_ptr error;          // a lorakv::Error when the request failed
};

struct RequestOptions : runtime::ReplyRules {
  std::string adapter;             // a loaded adapter's name; empty: the base model
  std::string role = "assistant";  // the reply's turn name (its header)
  std::vector<Message> messages;   // the chat so far (chat-style requests)
  // A completion-style request instead: this text, encoded as plain text, and the reply
  // continues it with no turn header. Set either prompt or messages.
  std::optional<std::string> prompt;
  int64_t n = 1;  // replies, each sampled with seed + its index, from one shared trajectory
  // Refuse a trajectory (messages or prompt, encoded) longer than this many tokens
  // (ContextLengthError at submit); 0: only the model's context bounds it.
  int64_t max_prompt_tokens = 0;
  SessionOptions session;                 // the request's session: mode, writer, eviction, priority
  std::chrono::milliseconds timeout{0};   // 0: none; past it every reply ends as kDeadline
  size_t max_pending_events = 256;        // events not yet taken before the request pauses
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(30)};  // paused this long: cancelled
  // Called once with the result on the engine thread when the request ends, after every
  // reply's last event and before kDone is queued. It must return quickly and must not
  // call a blocking runtime method.
  std::function<void(const RequestResult&)> on_complete;
};

struct RequestEvent {
  enum class Kind {
    kToken,      // `token` of reply `choice`: id, text piece, log-probabilities
    kChoiceEnd,  // reply `choice` ended: `end`
    kDone,       // the request is over: result() holds usage and every reply
  };
  Kind kind = Kind::kToken;
  int64_t choice = 0;
  runtime::DecodedToken token;
  ReplyEnd end = ReplyEnd::kEndOfTurn;
};

struct RequestChannel;  // the queue the engine thread fills (request.cpp)
struct RuntimeCore;

class RequestHandle {
 public:
  ~RequestHandle();
  RequestHandle(const RequestHandle&) = delete;
  RequestHandle& operator=(const RequestHandle&) = delete;

  // Waits until the engine thread has taken the request: its session opened, its adapter
  // bound, its messages appended and its replies started or waiting for admission. Throws
  // what refused it (UnknownAdapterError, ContextLengthError, ConfigError,
  // OverloadedError, SessionCapacityError, SessionClosedError).
  void accepted();
  // The next event, waiting at most `wait`; nullopt when none came in time, or after kDone.
  std::optional<RequestEvent> next(std::chrono::milliseconds wait = std::chrono::milliseconds::max());
  // Takes every event until the end; returns the result, or throws its error.
  RequestResult wait();
  // The result once the request is over (kDone was queued); nullopt before.
  std::optional<RequestResult> result() const;
  // Ends this request only (every reply as kCancelled); no-op once it ended or its runtime
  // is gone. Does not wait; safe from any thread, also racing the request's own end.
  void cancel();

 private:
  friend class Runtime;
  RequestHandle(std::shared_ptr<RuntimeCore> core, std::shared_ptr<RequestChannel> channel, int64_t id)
      : core_(std::move(core)), channel_(std::move(channel)), id_(id) {}
  void wake_engine();

  std::shared_ptr<RuntimeCore> core_;
  std::shared_ptr<RequestChannel> channel_;
  int64_t id_;
};

}  // namespace lorakv::agents
