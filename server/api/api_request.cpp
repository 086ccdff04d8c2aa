// server/api/api_request.cpp: parse_request: the table of known top-level fields (which
// endpoint has each, and how it is read), the rules that join two fields, and the log of
// ignored keys. The fields with more than one value are read in api_request_content.cpp.
#include "lorakv/server/api/api_request.h"

#include <array>
#include <unordered_map>

#include "lorakv/server/api/api_json_reader.h"
#include "lorakv/server/api/api_request_content.h"

namespace lorakv::server::api {
namespace {

// What the field readers leave for the rules that join two fields.
struct PairedFields {
  std::optional<int64_t> max_tokens, max_completion_tokens;
  bool stream_options_given = false;
  std::string tool_list_given;  // "tools" or "functions" when one of them is non-empty
  bool tool_choice_none = false;
};

struct FieldContext {
  const std::string& param;  // the field's name
  ApiRequest& request;
  PairedFields& paired;
  const ParseLimits& limits;
};
using FieldReader = void (*)(const Json& value, FieldContext& field);

enum EndpointSet : unsigned { kChat = 1u, kCompletions = 2u, kBoth = kChat | kCompletions };

struct KnownField {
  const char* name;
  unsigned endpoints;  // EndpointSet bits
  FieldReader read;    // called only for a non-null value
};

// Known to OpenAI's API, meaningless to this server, harmless to drop.
void accept_and_ignore(const Json&, FieldContext&) {}

// A field whose behaviour the server lacks: refused, so a client never silently loses it.
[[noreturn]] void refuse(const FieldContext& field, const std::string& why) { throw bad_request(why, field.param); }

// Sorted by purpose; the lookup is by name (find_known_field). Two entries share a name
// where the endpoints read it differently (logprobs).
const KnownField kKnownFields[] = {
    {"model", kBoth,
     [](const Json& v, FieldContext& f) {
       f.request.model = read_string(v, f.param);
       if (f.request.model.empty()) refuse(f, "`model` must not be empty");
     }},
    {"messages", kChat, [](const Json& v, FieldContext& f) { f.request.messages = read_messages(v, f.limits); }},
    {"prompt", kCompletions, [](const Json& v, FieldContext& f) { f.request.prompt = read_prompt(v); }},
    // Sampling and length.
    {"max_tokens", kBoth,
     [](const Json& v, FieldContext& f) { f.paired.max_tokens = read_integer(v, f.param, 1, f.limits.max_tokens); }},
    {"max_completion_tokens", kChat,
     [](const Json& v, FieldContext& f) {
       f.paired.max_completion_tokens = read_integer(v, f.param, 1, f.limits.max_tokens);
     }},
    {"temperature", kBoth,
     [](const Json& v, FieldContext& f) { f.request.temperature = read_number(v, f.param, {0, 2}); }},
    {"top_p", kBoth, [](const Json& v, FieldContext& f) { f.request.top_p = read_number(v, f.param, {0, 1, true}); }},
    {"seed", kBoth,
     [](const Json& v, FieldContext& f) { f.request.seed = read_integer(v, f.param, INT64_MIN, INT64_MAX); }},
    {"stop", kBoth, [](const Json& v, FieldContext& f) { f.request.stop = read_stop(v, f.limits); }},
    {"presence_penalty", kBoth,
     [](const Json& v, FieldContext& f) { f.request.presence_penalty = read_number(v, f.param, {-2, 2}); }},
    {"frequency_penalty", kBoth,
     [](const Json& v, FieldContext& f) { f.request.frequency_penalty = read_number(v, f.param, {-2, 2}); }},
    {"logit_bias", kBoth, [](const Json& v, FieldContext& f) { f.request.logit_bias = read_logit_bias(v, f.limits); }},
    {"logprobs", kChat, [](const Json& v, FieldContext& f) { f.request.logprobs = read_bool(v, f.param); }},
    {"top_logprobs", kChat,
     [](const Json& v, FieldContext& f) { f.request.top_logprobs = read_integer(v, f.param, 0, 20); }},
    // completions: `logprobs` is the number of top tokens to report with each token.
    {"logprobs", kCompletions,
     [](const Json& v, FieldContext& f) {
       f.request.top_logprobs = read_integer(v, f.param, 0, 20);
       f.request.logprobs = true;
     }},
    {"n", kBoth, [](const Json& v, FieldContext& f) { f.request.n = read_integer(v, f.param, 1, f.limits.max_n); }},
    {"stream", kBoth, [](const Json& v, FieldContext& f) { f.request.stream = read_bool(v, f.param); }},
    {"stream_options", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!v.is_object()) throw_wrong_type(f.param, "an object", v);
       f.paired.stream_options_given = true;
       const auto include_usage = v.find("include_usage");
       if (include_usage != v.end() && !include_usage->is_null()) {
         f.request.include_usage = read_bool(*include_usage, "stream_options.include_usage");
       }
     }},
    {"user", kBoth,
     [](const Json& v, FieldContext& f) {
       f.request.user = read_string(v, f.param);
       if (f.request.user.size() > f.limits.max_user_bytes) {
         refuse(f, "`user` must be at most " + std::to_string(f.limits.max_user_bytes) + " bytes");
       }
     }},
    // vLLM's sampling extras.
    {"top_k", kBoth,
     [](const Json& v, FieldContext& f) {
       const int64_t top_k = read_integer(v, f.param, -1, INT64_MAX);
       f.request.top_k = top_k < 0 ? 0 : top_k;  // vLLM's -1 and 0 both mean all tokens
     }},
    {"min_p", kBoth, [](const Json& v, FieldContext& f) { f.request.min_p = read_number(v, f.param, {0, 1}); }},
    {"repetition_penalty", kBoth,
     [](const Json& v, FieldContext& f) { f.request.repetition_penalty = read_number(v, f.param, {0, 2, true}); }},
    {"ignore_eos", kBoth, [](const Json& v, FieldContext& f) { f.request.ignore_eos = read_bool(v, f.param); }},
    {"stop_token_ids", kBoth,
     [](const Json& v, FieldContext& f) { f.request.stop_token_ids = read_stop_token_ids(v, f.limits); }},
    // Behaviour the server lacks.
    {"tools", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!v.is_array()) throw_wrong_type(f.param, "an array", v);
       if (!v.empty() && f.paired.tool_list_given.empty()) f.paired.tool_list_given = f.param;
     }},
    {"functions", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!v.is_array()) throw_wrong_type(f.param, "an array", v);
       if (!v.empty() && f.paired.tool_list_given.empty()) f.paired.tool_list_given = f.param;
     }},
    {"tool_choice", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!v.is_string() || (v != "none" && v != "auto")) {
         refuse(f, "`tool_choice` must be \"none\" or \"auto\": tool calls are not supported");
       }
       f.paired.tool_choice_none = v == "none";
     }},
    {"response_format", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!v.is_object()) throw_wrong_type(f.param, "an object", v);
       const auto type = v.find("type");
       if (type == v.end() || *type != "text") {
         refuse(f, "`response_format` other than {\"type\": \"text\"} is not supported");
       }
     }},
    {"audio", kBoth, [](const Json&, FieldContext& f) { refuse(f, "audio output is not supported"); }},
    {"modalities", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!v.is_array()) throw_wrong_type(f.param, "an array", v);
       for (const Json& modality : v) {
         if (modality != "text") refuse(f, "`modalities` other than \"text\" are not supported");
       }
     }},
    {"best_of", kBoth,
     [](const Json& v, FieldContext& f) {
       if (read_integer(v, f.param, INT64_MIN, INT64_MAX) != 1) refuse(f, "`best_of` other than 1 is not supported");
     }},
    {"echo", kBoth,
     [](const Json& v, FieldContext& f) {
       if (read_bool(v, f.param)) refuse(f, "`echo` is not supported");
     }},
    {"suffix", kBoth,
     [](const Json& v, FieldContext& f) {
       if (!read_string(v, f.param).empty()) refuse(f, "`suffix` (insertion) is not supported");
     }},
    {"prediction", kBoth,
     [](const Json&, FieldContext& f) { refuse(f, "`prediction` (predicted outputs) is not supported"); }},
    // OpenAI's bookkeeping and hints.
    {"metadata", kChat, accept_and_ignore},
    {"store", kChat, accept_and_ignore},
    {"parallel_tool_calls", kChat, accept_and_ignore},
    {"service_tier", kChat, accept_and_ignore},
    {"reasoning_effort", kChat, accept_and_ignore},
};

const KnownField* find_known_field(const std::string& name, Endpoint endpoint) {
  using Index = std::unordered_map<std::string, const KnownField*>;
  const auto index_of = [](unsigned endpoint_bit) {
    Index index;
    for (const KnownField& field : kKnownFields) {
      if (field.endpoints & endpoint_bit) index.emplace(field.name, &field);
    }
    return index;
  };
  static const Index chat = index_of(kChat), completions = index_of(kCompletions);
  const Index& index = endpoint == Endpoint::kChatCompletions ? chat : completions;
  const auto found = index.find(name);
  return found == index.end() ? nullptr : found->second;
}

void note_ignored_field(ApiRequest& request, const std::string& name, const ParseLimits& limits) {
  if (request.ignored_fields.size() < limits.max_ignored_fields) {
    request.ignored_fields.push_back(utf8_prefix(name, limits.max_ignored_field_bytes));
  }
}

// The rules that join two fields, once every field has been read.
void check_paired_fields(ApiRequest& request, const PairedFields& paired) {
  // max_completion_tokens is chat's newer name for max_tokens: given both, it wins.
  request.max_tokens = paired.max_completion_tokens ? paired.max_completion_tokens : paired.max_tokens;
  if (request.top_logprobs > 0 && !request.logprobs) {  // OpenAI's rule, as vLLM checks it
    throw bad_request("`top_logprobs` needs `logprobs` set to true", "top_logprobs");
  }
  if (paired.stream_options_given && !request.stream) {
    throw bad_request("`stream_options` is only allowed when `stream` is true", "stream_options");
  }
  if (!paired.tool_list_given.empty() && !paired.tool_choice_none) {
    throw bad_request("tools are not supported (with `tool_choice` \"none\" the list is accepted and ignored)",
                      paired.tool_list_given);
  }
}

}  // namespace

ApiRequest parse_request(std::string_view body, Endpoint endpoint, const ParseLimits& limits) {
  const Json parsed = parse_json_object(body, limits.max_depth);
  const std::array<std::string, 2> required = {"model", endpoint == Endpoint::kChatCompletions ? "messages" : "prompt"};
  for (const std::string& name : required) {
    const auto value = parsed.find(name);
    if (value == parsed.end() || value->is_null()) throw bad_request("`" + name + "` is required", name);
  }
  ApiRequest request;
  request.endpoint = endpoint;
  PairedFields paired;
  for (const auto& [name, value] : parsed.items()) {  // in key order: the first error is stable
    const KnownField* field = find_known_field(name, endpoint);
    if (!field) {
      note_ignored_field(request, name, limits);
    } else if (!value.is_null()) {  // null is the same as absent, as in OpenAI's API
      FieldContext context{name, request, paired, limits};
      field->read(value, context);
    }
  }
  check_paired_fields(request, paired);
  return request;
}

}  // namespace lorakv::server::api
