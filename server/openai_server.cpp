// server/openai_server.cpp: the routes, authentication, limits and lifecycle. A request's
// way: parse and check the body (server/api/), map it (request_mapping.h), take a running
// slot, submit it and wait until it is admitted and has its first event, and only then
// send the status line and hand the body to a CompletionStream.
#include "lorakv/server/openai_server.h"

#include <httplib.h>

#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/server/api/api_request.h"
#include "lorakv/server/completion_stream.h"
#include "lorakv/server/metrics.h"
#include "lorakv/server/request_mapping.h"
#include "lorakv/server/server_state.h"

namespace lorakv::server {
namespace {

// Worker threads beside the running requests' own: /health, /metrics, /v1/models and the
// refusals (429, 503) must get through while every request slot is taken.
constexpr size_t kSpareThreads = 8;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_error(httplib::Response& res, const api::ApiError& e) {
  res.status = e.status();
  if (e.status() == 429 || e.status() == 503) res.set_header("Retry-After", "1");
  res.set_content(api::error_body(e), "application/json");
}

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0;
}

api::ParseLimits parse_limits(const ServerLimits& l) {
  api::ParseLimits p;
  p.max_tokens = l.max_tokens;
  p.max_n = l.max_n;
  return p;
}

void check_options(const ServerOptions& o) {
  const ServerLimits& l = o.limits;
  auto positive = [](int64_t v, const char* key) {
    if (v < 1) throw ConfigError("a server limit must be at least 1", {"", key, "1 or more", std::to_string(v)});
  };
  positive(l.max_body_bytes, "max_body_bytes");
  positive(l.max_tokens, "max_tokens");
  positive(l.max_n, "max_n");
  positive(l.max_running_requests, "max_running_requests");
  positive(l.max_waiting_requests, "max_waiting_requests");
  if (l.max_prompt_tokens < 0) throw ConfigError("max_prompt_tokens must be 0 (none) or more", {"", "max_prompt_tokens"});
  if (o.port < 0 || o.port > 65535) throw ConfigError("the port is out of range", {"", "port", "0..65535", std::to_string(o.port)});
  if (o.host.empty()) throw ConfigError("the host is empty", {"", "host", "an address such as 127.0.0.1"});
}

// A request whose time ran out while it waited for room: no reply produced a token.
bool timed_out_before_a_token(const agents::RequestResult& r) {
  for (const agents::Choice& c : r.choices) {
    if (!c.tokens.empty() || c.end != agents::ReplyEnd::kDeadline) return false;
  }
  return !r.choices.empty();
}

// Admission: a request's first token comes once the pools hold its rows and it ran. The
// events up to it (or up to the end) are taken here, before the status line, so that a
// refusal while waiting for room (the queue's time limit) is still an error status.
std::deque<agents::RequestEvent> first_events(agents::RequestHandle& handle) {
  std::deque<agents::RequestEvent> events;
  while (std::optional<agents::RequestEvent> e = handle.next()) {
    events.push_back(std::move(*e));
    if (events.back().kind == agents::RequestEvent::Kind::kToken) return events;
    if (events.back().kind == agents::RequestEvent::Kind::kDone) {
      const std::optional<agents::RequestResult> result = handle.result();
      if (result && result->error) std::rethrow_exception(result->error);
      if (result && timed_out_before_a_token(*result)) {
        throw api::ApiError(503, "server_error", "the request reached request_timeout_s before its first token", "",
                            "timeout");
      }
      return events;
    }
  }
  return events;
}

// One completion request, up to the status line (see the file comment).
void answer_completion(const std::shared_ptr<ServerState>& state, const httplib::Request& req, httplib::Response& res,
                       api::Endpoint endpoint) {
  if (state->stopping()) throw api::ApiError(503, "server_error", "the server is stopping", "", "shutting_down");
  if (!state->ready()) throw api::ApiError(503, "server_error", "the model is still loading", "", "loading");
  const api::ApiRequest request = api::parse_request(req.body, endpoint, parse_limits(state->options().limits));
  agents::RequestOptions options = to_request_options(request, state->models(), state->options());
  const std::optional<int64_t> slot_id = state->take_slot();
  if (!slot_id) {
    throw api::ApiError(429, "rate_limit_error",
                        "the server is answering max_running_requests requests already; retry later", "",
                        "too_many_requests");
  }
  auto slot = std::make_unique<RunningSlot>(state, *slot_id);
  const bool chat = endpoint == api::Endpoint::kChatCompletions;
  ResponseIdentity who{(chat ? "chatcmpl-" : "cmpl-") + std::to_string(*slot_id), unix_now(), request.model, endpoint,
                       request.logprobs};
  if (!request.ignored_fields.empty()) {
    std::string names;
    for (const std::string& f : request.ignored_fields) names += (names.empty() ? "" : ", ") + api::loggable(f);
    log::info("request " + who.id + ": ignored unknown fields: " + names);
  }
  std::shared_ptr<agents::RequestHandle> handle;
  std::deque<agents::RequestEvent> first;
  try {
    handle = state->runtime().submit(std::move(options));
    state->track(*slot_id, handle);
    handle->accepted();
    first = first_events(*handle);
  } catch (const InternalError& e) {
    throw api::ApiError(500, "server_error", e.what(), "", "internal_error");
  } catch (const Error& e) {
    throw api_error_of(e);
  }
  log::info("request " + who.id + ": model " + request.model + (request.stream ? ", streamed" : "") + ", n " +
            std::to_string(request.n) + (request.user.empty() ? "" : ", user " + api::loggable(request.user)));
  auto stream = std::make_shared<CompletionStream>(state, std::move(slot), handle, who,
                                                   StreamForm{request.stream, request.include_usage, request.n},
                                                   std::move(first));
  res.set_chunked_content_provider(
      request.stream ? "text/event-stream" : "application/json",
      [stream](size_t, httplib::DataSink& sink) { return stream->pump(sink); },
      [stream](bool complete) { stream->release(complete); });
}

std::string models_body(const ServerState& state) {
  const int64_t created = unix_now();
  nlohmann::json data = nlohmann::json::array();
  const ServedModels& m = state.models();
  data.push_back({{"id", m.base}, {"object", "model"}, {"created", created}, {"owned_by", "lorakv"},
                  {"root", m.base}, {"parent", nullptr}});
  for (const std::string& a : m.adapters) {
    data.push_back({{"id", a}, {"object", "model"}, {"created", created}, {"owned_by", "lorakv"}, {"root", a},
                    {"parent", m.base}});
  }
  return nlohmann::json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false,
                                                                 nlohmann::json::error_handler_t::replace);
}

// The error object for a status cpp-httplib set by itself (no route, a body too large, a
// request it could not read).
api::ApiError status_error(int status, const ServerOptions& o) {
  switch (status) {
    case 404: return api::ApiError(404, "invalid_request_error", "no such route", "", "not_found");
    case 405: return api::ApiError(405, "invalid_request_error", "method not allowed", "", "method_not_allowed");
    case 413:
      return api::ApiError(413, "invalid_request_error",
                           "the request body is larger than max_body_bytes (" + std::to_string(o.limits.max_body_bytes) +
                               " bytes)", "", "body_too_large");
    default: return api::ApiError(status, status >= 500 ? "server_error" : "invalid_request_error", "bad request");
  }
}

}  // namespace

OpenAiServer::OpenAiServer(ServerOptions options) : http_(std::make_unique<httplib::Server>()) {
  check_options(options);
  state_ = std::make_shared<ServerState>(std::move(options));
  const ServerOptions& o = state_->options();
  const size_t threads = static_cast<size_t>(o.limits.max_running_requests) + kSpareThreads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(static_cast<size_t>(o.limits.max_body_bytes));
  add_routes();
}

OpenAiServer::~OpenAiServer() { shutdown(std::chrono::milliseconds(0)); }

void OpenAiServer::add_routes() {
  const std::shared_ptr<ServerState> state = state_;
  http_->set_pre_routing_handler([state](const httplib::Request& req, httplib::Response& res) {
    const std::string& key = state->options().api_key;
    if (key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (same_secret(req.get_header_value("Authorization"), "Bearer " + key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, api::ApiError(401, "authentication_error", "a valid API key is required (Authorization: Bearer KEY)",
                                  "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [state](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
        send_error(res, status_error(res.status, state->options()));
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    log::error("a request handler failed: " + what);
    send_error(res, api::ApiError(500, "server_error", "internal error: " + what, "", "internal_error"));
  });
  auto completion = [state](api::Endpoint endpoint) {
    return [state, endpoint](const httplib::Request& req, httplib::Response& res) {
      try {
        answer_completion(state, req, res, endpoint);
      } catch (const api::ApiError& e) {
        state->counters().failed_requests++;
        log::info("refused " + req.path + ": " + std::to_string(e.status()) + " " + e.what());
        send_error(res, e);
      }
    };
  };
  http_->Post("/v1/chat/completions", completion(api::Endpoint::kChatCompletions));
  http_->Post("/v1/completions", completion(api::Endpoint::kCompletions));
  http_->Get("/v1/models", [state](const httplib::Request&, httplib::Response& res) {
    if (!state->ready()) return send_error(res, api::ApiError(503, "server_error", "the model is still loading", "", "loading"));
    res.set_content(models_body(*state), "application/json");
  });
  http_->Get("/health", [state](const httplib::Request&, httplib::Response& res) {
    const char* status = state->stopping() ? "stopping" : state->ready() ? "ok" : "loading";
    res.status = state->ready() && !state->stopping() ? 200 : 503;
    res.set_content(nlohmann::json{{"status", status}}.dump(), "application/json");
  });
  if (state_->options().metrics) {
    http_->Get("/metrics", [state](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(*state), "text/plain; version=0.0.4");
    });
  }
}

int OpenAiServer::start() {
  const ServerOptions& o = state_->options();
  port_ = o.port == 0 ? http_->bind_to_any_port(o.host) : (http_->bind_to_port(o.host, o.port) ? o.port : -1);
  if (port_ <= 0) {
    throw Error(ErrorCode::kSystem, "cannot listen", "cannot bind " + o.host + ":" + std::to_string(o.port),
                {"", "port", "a free port on an address of this machine", "", "pick another --port or --host"});
  }
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  log::info("listening on http://" + o.host + ":" + std::to_string(port_));
  return port_;
}

void OpenAiServer::attach(std::shared_ptr<agents::Runtime> runtime, const std::string& base_model_name) {
  ServedModels models{base_model_name, runtime->adapters()};
  if (std::find(models.adapters.begin(), models.adapters.end(), base_model_name) != models.adapters.end()) {
    throw ConfigError("an adapter has the base model's name", {"", base_model_name, "distinct model names"});
  }
  state_->attach(std::move(runtime), std::move(models));
  log::info("serving " + base_model_name + " and " + std::to_string(state_->models().adapters.size()) + " adapters");
}

bool OpenAiServer::running() const { return listener_.joinable() && http_->is_running(); }

void OpenAiServer::shutdown(std::chrono::milliseconds grace) {
  if (!listener_.joinable()) return;
  state_->begin_stopping();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (state_->running() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (state_->running() > 0) {
    log::warn(std::to_string(state_->running()) + " requests still running at shutdown: cancelled");
    state_->cancel_all();
  }
  http_->stop();
  listener_.join();
  log::info("server stopped");
}

}  // namespace lorakv::server
