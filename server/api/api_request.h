// server/api/api_request.h: one OpenAI API request body, parsed and checked: what
// `POST /v1/chat/completions` and `POST /v1/completions` accept, as plain structs. Torch-
// free (nlohmann/json only), so the request fuzzer (fuzz/) links it alone. The server
// (server/) turns an ApiRequest into an agents::RequestOptions; checks that need the model
// (the adapter's name, token ids against the vocabulary, the prompt's length) happen there.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lorakv/server/api/api_error.h"

namespace lorakv::server::api {

enum class Endpoint {
  kChatCompletions,  // POST /v1/chat/completions: messages, the model's chat template
  kCompletions,      // POST /v1/completions: a raw prompt, no turn header
};

struct ApiMessage {
  std::string role;     // system (also for OpenAI's `developer`), user, assistant or tool
  std::string content;  // the text parts joined; plain text (no special tokens)
};

// Bounds the parser applies; the server fills them from its options.
struct ParseLimits {
  int64_t max_tokens = 4096;       // the most a request may ask for in max_tokens
  int64_t max_n = 16;              // replies per request
  size_t max_messages = 1024;      // messages in one chat request
  size_t max_stop = 16;            // stop strings (OpenAI allows 4; vLLM any)
  size_t max_stop_bytes = 256;     // bytes of one stop string
  size_t max_logit_bias = 1024;    // entries of logit_bias
  size_t max_stop_token_ids = 256; // entries of stop_token_ids
  size_t max_user_bytes = 256;     // bytes of `user` (it goes to the log)
  int max_depth = 16;              // JSON nesting: containers inside containers, the body's object is 1
  // The log line of ignored keys: a hostile body with many long keys cannot grow it.
  size_t max_ignored_fields = 32;       // names kept in ApiRequest::ignored_fields
  size_t max_ignored_field_bytes = 64;  // bytes of one kept name (cut at a UTF-8 boundary)
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;                 // required: the base model's name or an adapter's
  std::vector<ApiMessage> messages;  // chat: at least one
  std::string prompt;                // completions: non-empty
  std::optional<int64_t> max_tokens; // max_completion_tokens, else max_tokens; absent: the server's default
  double temperature = 1.0;          // OpenAI's default; 0: greedy
  double top_p = 1.0;
  std::optional<int64_t> seed;       // absent: the server draws one
  std::vector<std::string> stop;     // a string or a list
  double presence_penalty = 0.0, frequency_penalty = 0.0;  // [-2, 2]
  std::map<int32_t, double> logit_bias;                     // token id -> [-100, 100]
  bool logprobs = false;       // chat: `logprobs`; completions: `logprobs` given (an integer)
  int64_t top_logprobs = 0;    // chat: `top_logprobs`; completions: the `logprobs` integer; 0..20
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (only with stream)
  std::string user;            // OpenAI's `user`, kept for the log (client bytes: escape them there)
  // vLLM's sampling extras, which the runtime's sampler has.
  int64_t top_k = 0;                    // 0: all tokens (the request's -1 and 0 both mean that)
  double min_p = 0.0;                   // [0, 1]; 0: off
  double repetition_penalty = 1.0;      // (0, 2]; 1: off
  bool ignore_eos = false;              // keep generating past the end-of-sequence token
  std::vector<int32_t> stop_token_ids;  // token ids that end the reply, besides the model's own
  // Top-level keys the server does not know: ignored, and logged (vLLM's behaviour). At most
  // limits.max_ignored_fields names, each cut to limits.max_ignored_field_bytes, sorted; valid
  // UTF-8 that may hold control characters, so the log escapes them.
  std::vector<std::string> ignored_fields;
};

// Parses and checks one body. Throws ApiError (status 400, `param` naming the field) for
// broken JSON, invalid UTF-8, nesting deeper than limits.max_depth, a wrong type, a value
// out of range, a missing field, and the known fields whose meaning the server lacks:
// `tools`/`functions` (unless `tool_choice` is "none"), `tool_choice` other than none/auto,
// `response_format` other than text, image/audio/file content parts, a message's
// `tool_calls`, `audio`, `modalities` other than text, `best_of` other than 1, `echo`,
// `suffix`, `prediction`. Those are refused on both endpoints: a client that sends one
// expects its behaviour. Inside messages, param is a path (messages[2].role). A null value is
// the same as an absent key. Error messages quote at most about 40 bytes of the client's text.
ApiRequest parse_request(std::string_view body, Endpoint endpoint, const ParseLimits& limits = {});

}  // namespace lorakv::server::api
