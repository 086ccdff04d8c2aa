// server/request_mapping.cpp: ApiRequest -> RequestOptions, lorakv::Error -> ApiError.
#include "lorakv/server/request_mapping.h"

#include <algorithm>
#include <random>

#include "lorakv/agents/errors.h"

namespace lorakv::server {
namespace {

// A request that names no seed samples from a fresh one, as OpenAI's does.
int64_t fresh_seed() {
  static thread_local std::mt19937_64 source{std::random_device{}()};
  return static_cast<int64_t>(source() >> 1);
}

// OpenAI's default max_tokens of a text completion.
constexpr int64_t kCompletionDefaultMaxTokens = 16;

// The request field a runtime option's name stands for.
std::string api_param(const std::string& key) {
  if (key == "stop_strings") return "stop";
  if (key == "messages" || key == "prompt") return key;
  return key;
}

}  // namespace

bool ServedModels::has(const std::string& name) const {
  return name == base || std::find(adapters.begin(), adapters.end(), name) != adapters.end();
}

agents::RequestOptions to_request_options(const api::ApiRequest& r, const ServedModels& models,
                                          const ServerOptions& options) {
  if (!models.has(r.model)) {
    throw api::ApiError(404, "invalid_request_error", "the model `" + r.model.substr(0, 64) + "` does not exist",
                        "model", "model_not_found");
  }
  agents::RequestOptions o;
  o.adapter = r.model == models.base ? "" : r.model;
  if (r.endpoint == api::Endpoint::kChatCompletions) {
    for (const api::ApiMessage& m : r.messages) o.messages.push_back({m.role, m.content});
  } else {
    o.prompt = r.prompt;
  }
  const int64_t default_max = r.endpoint == api::Endpoint::kCompletions
                                  ? std::min(kCompletionDefaultMaxTokens, options.limits.max_tokens)
                                  : options.limits.max_tokens;
  o.max_tokens = r.max_tokens.value_or(default_max);
  o.sampling.temperature = r.temperature;
  o.sampling.top_p = r.top_p;
  o.sampling.top_k = r.top_k;
  o.sampling.min_p = r.min_p;
  o.sampling.repetition_penalty = r.repetition_penalty;
  o.sampling.presence_penalty = r.presence_penalty;
  o.sampling.frequency_penalty = r.frequency_penalty;
  o.sampling.logit_bias = r.logit_bias;
  o.sampling.seed = static_cast<uint64_t>(r.seed.value_or(fresh_seed()));
  o.stop_strings = r.stop;
  o.stop_token_ids = r.stop_token_ids;
  o.ignore_end_tokens = r.ignore_eos;
  o.logprobs = r.logprobs;
  o.top_logprobs = r.top_logprobs;
  o.n = r.n;
  o.session = options.sharing;
  o.max_prompt_tokens = options.limits.max_prompt_tokens;
  o.timeout = options.limits.request_timeout;
  return o;
}

api::ApiError api_error_of(const Error& e) {
  const std::string message = e.what();
  const std::string param = api_param(e.context().key);
  switch (e.code()) {
    case ErrorCode::kConfig:
    case ErrorCode::kUsage:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kTokenizer:
      return api::ApiError(400, "invalid_request_error", message, param);
    case ErrorCode::kContextLength:
      return api::ApiError(400, "invalid_request_error", message, "messages", "context_length_exceeded");
    case ErrorCode::kCapacity:  // could not fit even alone: waiting would not help
      return api::ApiError(400, "invalid_request_error", message, "", "capacity_exceeded");
    case ErrorCode::kUnknownAdapter:
      return api::ApiError(404, "invalid_request_error", message, "model", "model_not_found");
    case ErrorCode::kOverloaded:
      return api::ApiError(503, "server_error", message, "", "overloaded");
    case ErrorCode::kSessionClosed:
      return api::ApiError(503, "server_error", message, "", "shutting_down");
    default:
      return api::ApiError(500, "server_error", message, "", error_code_name(e.code()));
  }
}

}  // namespace lorakv::server
