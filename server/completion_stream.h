// server/completion_stream.h: one admitted request's response body, written step by step
// through cpp-httplib's chunked content provider, streamed (server-sent events) or not
// (one JSON object at the end). Each call takes the request's next event and checks the
// client's socket without writing to it, so a client that leaves, streaming or not, has
// its request cancelled (its rows freed) within about one engine step.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "lorakv/agents/request.h"
#include "lorakv/server/openai_json.h"
#include "lorakv/server/server_state.h"

namespace httplib {
class DataSink;
}

namespace lorakv::server {

// How the response is written.
struct StreamForm {
  bool stream = false;         // server-sent events; else one JSON object
  bool include_usage = false;  // streamed: a usage chunk before [DONE]
  int64_t replies = 1;         // the request's n
};

class CompletionStream {
 public:
  // `first`: the request's first events, taken while admitting it (before the status line).
  CompletionStream(std::shared_ptr<ServerState> state, std::unique_ptr<RunningSlot> slot,
                   std::shared_ptr<agents::RequestHandle> handle, ResponseIdentity who, StreamForm form,
                   std::deque<agents::RequestEvent> first);

  // The content provider's call: writes what the next event gives; false stops the
  // response (the client left: the request is cancelled).
  bool pump(httplib::DataSink& sink);
  // The provider's releaser: the response ended (`complete`: every byte was written).
  void release(bool complete);

 private:
  bool write(httplib::DataSink& sink, const std::string& text);
  bool on_event(httplib::DataSink& sink, const agents::RequestEvent& event);
  bool on_done(httplib::DataSink& sink);
  void count(const agents::RequestResult& result);

  std::shared_ptr<ServerState> state_;
  std::unique_ptr<RunningSlot> slot_;
  std::shared_ptr<agents::RequestHandle> handle_;
  ResponseIdentity who_;
  StreamForm form_;
  std::deque<agents::RequestEvent> first_;
  bool started_ = false, finished_ = false;
  std::chrono::steady_clock::time_point opened_;
};

}  // namespace lorakv::server
