// server/openai_json.h: lorakv's replies in OpenAI's wire format: chat and text
// completions, their streamed chunks (server-sent events), usage and log-probabilities.
// Every text is valid UTF-8 and every number finite, whatever the tokens hold.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lorakv/agents/request.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/server/api/api_request.h"

namespace lorakv::server {

// What every object of one response repeats.
struct ResponseIdentity {
  std::string id;       // chatcmpl-<n> or cmpl-<n>
  int64_t created = 0;  // Unix seconds
  std::string model;    // the request's `model`, as it named it
  api::Endpoint endpoint = api::Endpoint::kChatCompletions;
  bool logprobs = false;  // the request asked for log-probabilities
};

// OpenAI's finish_reason: "stop" (an end token, a stop id or string), "length" (max_tokens,
// the context, the request's time), "abort" (cancelled: the client left, the server stops).
const char* finish_reason_of(agents::ReplyEnd end);

// The whole non-streamed response.
std::string completion_body(const ResponseIdentity& who, const agents::RequestResult& result,
                            const formats::BpeTokenizer& tokenizer);

// Streamed chunks, each one server-sent event ("data: {...}\n\n").
std::string role_chunk(const ResponseIdentity& who, int64_t choice);  // chat only: the assistant role
std::string token_chunk(const ResponseIdentity& who, int64_t choice, const runtime::DecodedToken& token,
                        const formats::BpeTokenizer& tokenizer);
std::string finish_chunk(const ResponseIdentity& who, int64_t choice, agents::ReplyEnd end);
std::string usage_chunk(const ResponseIdentity& who, const agents::Usage& usage);  // empty `choices`
std::string error_event(const std::string& error_json);
const char* done_event();  // "data: [DONE]\n\n"

}  // namespace lorakv::server
