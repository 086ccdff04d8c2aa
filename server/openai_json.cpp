// server/openai_json.cpp: the wire format. One place builds each object, for the whole
// response and for its chunks alike.
#include "lorakv/server/openai_json.h"

#include <cmath>

#include <nlohmann/json.hpp>

namespace lorakv::server {
namespace {

using nlohmann::json;

// Log-probabilities are finite JSON numbers: -inf (a token the model rules out) becomes
// -9999, vLLM's stand-in.
double finite_logprob(double x) { return std::isfinite(x) ? x : -9999.0; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

json token_bytes(const std::string& piece) {
  json bytes = json::array();
  for (const unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// One token's entry of a chat response's logprobs.content.
json chat_logprob(int32_t token, double logprob, const std::vector<runtime::TokenLogprob>& top,
                  const formats::BpeTokenizer& tokenizer) {
  const std::string& piece = tokenizer.token_piece(token);
  json entry = {{"token", piece}, {"logprob", finite_logprob(logprob)}, {"bytes", token_bytes(piece)}};
  json alternatives = json::array();
  for (const runtime::TokenLogprob& t : top) {
    const std::string& p = tokenizer.token_piece(t.token);
    alternatives.push_back({{"token", p}, {"logprob", finite_logprob(t.logprob)}, {"bytes", token_bytes(p)}});
  }
  entry["top_logprobs"] = std::move(alternatives);
  return entry;
}

// A text completion's logprobs object over `count` tokens.
json completion_logprobs(const std::vector<int32_t>& tokens, const std::vector<double>& logprobs,
                         const std::vector<std::vector<runtime::TokenLogprob>>& top, size_t count,
                         const formats::BpeTokenizer& tokenizer) {
  json pieces = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < count; ++i) {
    const std::string& piece = tokenizer.token_piece(tokens[i]);
    pieces.push_back(piece);
    values.push_back(finite_logprob(i < logprobs.size() ? logprobs[i] : 0.0));
    json alternatives = json::object();
    if (i < top.size()) {
      for (const runtime::TokenLogprob& t : top[i]) alternatives[tokenizer.token_piece(t.token)] = finite_logprob(t.logprob);
    }
    tops.push_back(std::move(alternatives));
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", pieces}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// The tokens a reply's log-probabilities cover: every generated one but a final end token,
// which is not part of the text.
size_t visible_tokens(const agents::Choice& c) {
  size_t n = c.tokens.size();
  if (n > 0 && c.end == agents::ReplyEnd::kEndOfTurn) --n;
  return std::min(n, c.logprobs.size());
}

json usage_json(const agents::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

bool is_chat(const ResponseIdentity& who) { return who.endpoint == api::Endpoint::kChatCompletions; }

json envelope(const ResponseIdentity& who, bool chunk) {
  const char* object = is_chat(who) ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", who.id}, {"object", object}, {"created", who.created}, {"model", who.model}};
}

json choice_json(const ResponseIdentity& who, int64_t index, const agents::Choice& c,
                 const formats::BpeTokenizer& tokenizer) {
  json choice = {{"index", index}, {"finish_reason", finish_reason_of(c.end)}};
  json logprobs = nullptr;
  if (who.logprobs) {
    const size_t n = visible_tokens(c);
    if (is_chat(who)) {
      json content = json::array();
      for (size_t i = 0; i < n; ++i) {
        static const std::vector<runtime::TokenLogprob> kNone;
        content.push_back(chat_logprob(c.tokens[i], c.logprobs[i], i < c.top_logprobs.size() ? c.top_logprobs[i] : kNone,
                                       tokenizer));
      }
      logprobs = {{"content", std::move(content)}};
    } else {
      logprobs = completion_logprobs(c.tokens, c.logprobs, c.top_logprobs, n, tokenizer);
    }
  }
  if (is_chat(who)) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = std::move(logprobs);
  return choice;
}

}  // namespace

const char* finish_reason_of(agents::ReplyEnd end) {
  switch (end) {
    case agents::ReplyEnd::kEndOfTurn:
    case agents::ReplyEnd::kStopString:
      return "stop";
    case agents::ReplyEnd::kLength:
    case agents::ReplyEnd::kDeadline:
      return "length";
    case agents::ReplyEnd::kCallback:
    case agents::ReplyEnd::kCancelled:
    case agents::ReplyEnd::kStalled:
      return "abort";
  }
  return "abort";
}

std::string completion_body(const ResponseIdentity& who, const agents::RequestResult& result,
                            const formats::BpeTokenizer& tokenizer) {
  json body = envelope(who, false);
  json choices = json::array();
  for (size_t i = 0; i < result.choices.size(); ++i) {
    choices.push_back(choice_json(who, static_cast<int64_t>(i), result.choices[i], tokenizer));
  }
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(result.usage);
  return dump(body);
}

std::string role_chunk(const ResponseIdentity& who, int64_t choice) {
  json body = envelope(who, true);
  body["choices"] = json::array(
      {{{"index", choice}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
  return sse(body);
}

std::string token_chunk(const ResponseIdentity& who, int64_t choice, const runtime::DecodedToken& token,
                        const formats::BpeTokenizer& tokenizer) {
  json body = envelope(who, true);
  json c = {{"index", choice}, {"finish_reason", nullptr}};
  json logprobs = nullptr;
  if (who.logprobs) {
    if (is_chat(who)) {
      logprobs = {{"content", json::array({chat_logprob(token.token, token.logprob, token.top, tokenizer)})}};
    } else {
      logprobs = completion_logprobs({token.token}, {token.logprob}, {token.top}, 1, tokenizer);
    }
  }
  if (is_chat(who)) {
    c["delta"] = {{"content", token.text}};
  } else {
    c["text"] = token.text;
  }
  c["logprobs"] = std::move(logprobs);
  body["choices"] = json::array({std::move(c)});
  return sse(body);
}

std::string finish_chunk(const ResponseIdentity& who, int64_t choice, agents::ReplyEnd end) {
  json body = envelope(who, true);
  json c = {{"index", choice}, {"logprobs", nullptr}, {"finish_reason", finish_reason_of(end)}};
  if (is_chat(who)) {
    c["delta"] = json::object();
  } else {
    c["text"] = "";
  }
  body["choices"] = json::array({std::move(c)});
  return sse(body);
}

std::string usage_chunk(const ResponseIdentity& who, const agents::Usage& usage) {
  json body = envelope(who, true);
  body["choices"] = json::array();
  body["usage"] = usage_json(usage);
  return sse(body);
}

std::string error_event(const std::string& error_json) { return "data: " + error_json + "\n\n"; }

const char* done_event() { return "data: [DONE]\n\n"; }

}  // namespace lorakv::server
