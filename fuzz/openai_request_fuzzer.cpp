// fuzz/openai_request_fuzzer.cpp: an OpenAI request body as `lorakv serve` reads it:
// parse_request (server/api/) for both endpoints, under the default limits and under tight
// ones. The expected answer to bad input is an ApiError with status 400 whose error object
// is valid JSON and whose message stays short whatever the body holds; any other exception is
// a finding, and so is an accepted request that breaks what the parser promises (a model, a
// message or prompt, every value in its range, a bounded log of ignored keys).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.h"
#include "lorakv/server/api/api_error.h"
#include "lorakv/server/api/api_request.h"

namespace {

using lorakv::server::api::ApiError;
using lorakv::server::api::ApiRequest;
using lorakv::server::api::Endpoint;
using lorakv::server::api::ParseLimits;

// A message that grows with the body would let a client fill the server's log.
constexpr size_t kMaxMessageBytes = 1024;

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "openai_request: FINDING: %s: %s\n", what, detail.substr(0, 2000).c_str());
  std::abort();
}

void check_accepted(const ApiRequest& r, Endpoint endpoint, const ParseLimits& limits) {
  const auto require = [](bool holds, const char* promise) {
    if (!holds) finding("an accepted request breaks a promise", promise);
  };
  require(r.endpoint == endpoint, "endpoint");
  require(!r.model.empty(), "model is non-empty");
  if (endpoint == Endpoint::kChatCompletions) {
    require(!r.messages.empty() && r.messages.size() <= limits.max_messages, "1..max_messages messages");
    for (const auto& m : r.messages) {
      require(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool", "a known role");
    }
  } else {
    require(!r.prompt.empty() && r.messages.empty(), "a prompt and no messages");
  }
  require(!r.max_tokens || (*r.max_tokens >= 1 && *r.max_tokens <= limits.max_tokens), "max_tokens in range");
  require(r.temperature >= 0 && r.temperature <= 2, "temperature in [0, 2]");
  require(r.top_p > 0 && r.top_p <= 1, "top_p in (0, 1]");
  require(r.presence_penalty >= -2 && r.presence_penalty <= 2, "presence_penalty in [-2, 2]");
  require(r.frequency_penalty >= -2 && r.frequency_penalty <= 2, "frequency_penalty in [-2, 2]");
  require(r.stop.size() <= limits.max_stop, "at most max_stop stop strings");
  for (const auto& s : r.stop) require(!s.empty() && s.size() <= limits.max_stop_bytes, "stop string size");
  require(r.logit_bias.size() <= limits.max_logit_bias, "at most max_logit_bias entries");
  for (const auto& [token, bias] : r.logit_bias) require(token >= 0 && bias >= -100 && bias <= 100, "logit_bias range");
  require(r.top_logprobs >= 0 && r.top_logprobs <= 20 && (r.top_logprobs == 0 || r.logprobs), "top_logprobs");
  require(r.n >= 1 && r.n <= limits.max_n, "n in range");
  require(!r.include_usage || r.stream, "include_usage only with stream");
  require(r.user.size() <= limits.max_user_bytes, "user size");
  require(r.top_k >= 0, "top_k is 0 or more");
  require(r.min_p >= 0 && r.min_p <= 1, "min_p in [0, 1]");
  require(r.repetition_penalty > 0 && r.repetition_penalty <= 2, "repetition_penalty in (0, 2]");
  require(r.stop_token_ids.size() <= limits.max_stop_token_ids, "at most max_stop_token_ids ids");
  for (const int32_t id : r.stop_token_ids) require(id >= 0, "stop token ids are not negative");
  require(r.ignored_fields.size() <= limits.max_ignored_fields, "at most max_ignored_fields names");
  for (const auto& name : r.ignored_fields) require(name.size() <= limits.max_ignored_field_bytes, "name size");
}

void check_refusal(const ApiError& e) {
  if (e.status() != 400) finding("a refusal that is not a 400", e.what());
  if (std::string_view(e.what()).size() > kMaxMessageBytes) finding("an unbounded error message", e.what());
  try {
    (void)nlohmann::json::parse(error_body(e));  // parse refuses invalid UTF-8
  } catch (const std::exception&) {
    finding("an error object that is not valid JSON", e.what());
  }
}

void parse_one(std::string_view body, Endpoint endpoint, const ParseLimits& limits) {
  try {
    check_accepted(lorakv::server::api::parse_request(body, endpoint, limits), endpoint, limits);
  } catch (const ApiError& e) {
    check_refusal(e);  // bad input refused the documented way
  } catch (const std::exception& e) {
    finding((std::string("exception other than ApiError: ") + typeid(e).name()).c_str(), e.what());
  } catch (...) {
    finding("exception of unknown type", "");
  }
}

ParseLimits tight_limits() {
  ParseLimits limits;
  limits.max_tokens = 8;
  limits.max_n = 2;
  limits.max_messages = 2;
  limits.max_stop = 1;
  limits.max_stop_bytes = 4;
  limits.max_logit_bias = 1;
  limits.max_stop_token_ids = 1;
  limits.max_user_bytes = 4;
  limits.max_depth = 3;
  limits.max_ignored_fields = 1;
  limits.max_ignored_field_bytes = 3;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes = lorakv::fuzz::exact_copy(data, size);
  const std::string_view body(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  static const ParseLimits default_limits, tight = tight_limits();
  for (const Endpoint endpoint : {Endpoint::kChatCompletions, Endpoint::kCompletions}) {
    parse_one(body, endpoint, default_limits);
    parse_one(body, endpoint, tight);
  }
  return 0;
}
