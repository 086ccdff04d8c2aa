// server/completion_stream.cpp: events -> chunks.
#include "lorakv/server/completion_stream.h"

#include <httplib.h>

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/server/request_mapping.h"

namespace lorakv::server {
namespace {

// How long one provider call waits for an event before it checks the socket again: well
// under an engine step of a small model, so a client's leaving is seen within a step.
constexpr std::chrono::milliseconds kPoll{10};

}  // namespace

CompletionStream::CompletionStream(std::shared_ptr<ServerState> state, std::unique_ptr<RunningSlot> slot,
                                   std::shared_ptr<agents::RequestHandle> handle, ResponseIdentity who, StreamForm form,
                                   std::deque<agents::RequestEvent> first)
    : state_(std::move(state)), slot_(std::move(slot)), handle_(std::move(handle)), who_(std::move(who)),
      form_(form), first_(std::move(first)),
      opened_(std::chrono::steady_clock::now()) {}

bool CompletionStream::write(httplib::DataSink& sink, const std::string& text) {
  return sink.write(text.data(), text.size());
}

bool CompletionStream::pump(httplib::DataSink& sink) {
  if (finished_) return true;
  if (!sink.is_writable()) {  // the client left (a peek sees the closed socket)
    handle_->cancel();
    state_->counters().disconnects++;
    log::info("request " + who_.id + ": the client left; cancelled");
    return false;
  }
  if (!started_) {
    started_ = true;
    if (form_.stream && who_.endpoint == api::Endpoint::kChatCompletions) {
      for (int64_t i = 0; i < form_.replies; ++i) {
        if (!write(sink, role_chunk(who_, i))) return false;
      }
    }
  }
  std::optional<agents::RequestEvent> event;
  if (!first_.empty()) {
    event = std::move(first_.front());
    first_.pop_front();
  } else {
    event = handle_->next(kPoll);
  }
  if (!event) return true;
  return on_event(sink, *event);
}

bool CompletionStream::on_event(httplib::DataSink& sink, const agents::RequestEvent& e) {
  switch (e.kind) {
    case agents::RequestEvent::Kind::kToken: {
      if (!form_.stream) return true;
      const bool end_token = e.token.finish == runtime::FinishReason::kStopToken;
      if (e.token.text.empty() && (!who_.logprobs || end_token)) return true;
      return write(sink, token_chunk(who_, e.choice, e.token, state_->runtime().tokenizer()));
    }
    case agents::RequestEvent::Kind::kChoiceEnd:
      return form_.stream ? write(sink, finish_chunk(who_, e.choice, e.end)) : true;
    case agents::RequestEvent::Kind::kDone:
      return on_done(sink);
  }
  return true;
}

bool CompletionStream::on_done(httplib::DataSink& sink) {
  finished_ = true;
  const std::optional<agents::RequestResult> result = handle_->result();
  std::string body;
  if (result && result->error) {
    api::ApiError error(500, "server_error", "the request failed");
    try {
      std::rethrow_exception(result->error);
    } catch (const Error& e) {
      error = api_error_of(e);
    } catch (const std::exception& e) {
      error = api::ApiError(500, "server_error", e.what());
    }
    log::warn("request " + who_.id + " failed after it started: " + error.what());
    body = form_.stream ? error_event(api::error_body(error)) + done_event() : api::error_body(error);
  } else if (result) {
    count(*result);
    if (form_.stream) {
      if (form_.include_usage) body += usage_chunk(who_, result->usage);
      body += done_event();
    } else {
      body = completion_body(who_, *result, state_->runtime().tokenizer());
    }
  }
  if (!write(sink, body)) return false;
  sink.done();
  return true;
}

void CompletionStream::count(const agents::RequestResult& r) {
  ServerCounters& c = state_->counters();
  c.requests++;
  c.prompt_tokens += r.usage.prompt_tokens;
  c.cached_tokens += r.usage.cached_tokens;
  c.completion_tokens += r.usage.completion_tokens;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_).count();
  log::info("request " + who_.id + " done: model " + who_.model + ", prompt " + std::to_string(r.usage.prompt_tokens) +
            " (cached " + std::to_string(r.usage.cached_tokens) + "), completion " +
            std::to_string(r.usage.completion_tokens) + " tokens, " + std::to_string(seconds) + " s");
}

void CompletionStream::release(bool complete) {
  if (!complete) handle_->cancel();  // a write failed or the server stopped: free the rows now
  handle_.reset();                   // dropping the handle cancels whatever still runs
  slot_.reset();
}

}  // namespace lorakv::server
