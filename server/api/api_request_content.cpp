// server/api/api_request_content.cpp: chat messages (roles, text parts, the refusals of
// images, audio, files and tool calls), the completions prompt, stop strings, logit_bias and
// stop_token_ids.
#include "lorakv/server/api/api_request_content.h"

#include <optional>

#include "lorakv/server/api/api_error.h"

namespace lorakv::server::api {
namespace {

std::string backticked(const std::string& param) { return "`" + param + "`"; }

std::string message_param(size_t index, const char* field) {
  return "messages[" + std::to_string(index) + "]" + (*field ? "." : "") + field;
}

// OpenAI's roles, and what each becomes: `developer` is the newer name of system.
std::string read_role(const Json& message, size_t index) {
  const std::string param = message_param(index, "role");
  const auto role = message.find("role");
  if (role == message.end() || role->is_null()) throw bad_request(backticked(param) + " is required", param);
  const std::string name = read_string(*role, param);
  if (name == "developer") return "system";
  if (name == "system" || name == "user" || name == "assistant" || name == "tool") return name;
  throw bad_request(backticked(param) + " must be system, developer, user, assistant or tool; found " +
                        quote_client_text(name),
                    param);
}

// The text of one content part; a part of another kind is refused with what it is.
std::string content_part_text(const Json& part, size_t part_index, const std::string& param) {
  const std::string where = backticked(param) + " part " + std::to_string(part_index);
  if (!part.is_object()) throw bad_request(where + " must be an object; found " + json_type_name(part), param);
  const auto type = part.find("type");
  if (type == part.end() || !type->is_string()) throw bad_request(where + " needs a string `type`", param);
  const std::string& kind = type->get_ref<const std::string&>();
  if (kind == "text") {
    const auto text = part.find("text");
    if (text == part.end() || !text->is_string()) throw bad_request(where + " needs a string `text`", param);
    return text->get<std::string>();
  }
  if (kind == "image_url" || kind == "image") throw bad_request("images are not supported (" + where + ")", param);
  if (kind == "input_audio" || kind == "audio") throw bad_request("audio is not supported (" + where + ")", param);
  if (kind == "file") throw bad_request("files are not supported (" + where + ")", param);
  throw bad_request(where + " has type " + quote_client_text(kind) + "; only text parts are supported", param);
}

// `content`: a string, or text parts joined with nothing between them (OpenAI's and vLLM's
// reading of a list of text parts).
std::string read_content(const Json& message, size_t index) {
  const std::string param = message_param(index, "content");
  const auto content = message.find("content");
  if (content == message.end() || content->is_null()) throw bad_request(backticked(param) + " is required", param);
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) throw_wrong_type(param, "a string or an array of text parts", *content);
  std::string text;
  for (size_t part = 0; part < content->size(); ++part) text += content_part_text((*content)[part], part, param);
  return text;
}

ApiMessage read_message(const Json& message, size_t index) {
  if (!message.is_object()) throw_wrong_type(message_param(index, ""), "an object", message);
  ApiMessage out;
  out.role = read_role(message, index);
  // Checked before content: an assistant turn that only calls tools has null content.
  const auto tool_calls = message.find("tool_calls");
  if (tool_calls != message.end() && !tool_calls->is_null() && !(tool_calls->is_array() && tool_calls->empty())) {
    throw bad_request("tool calls are not supported", message_param(index, "tool_calls"));
  }
  out.content = read_content(message, index);
  return out;  // `name` and `tool_call_id` carry nothing the runtime uses
}

// A token id as logit_bias's keys write it: decimal digits, no sign, no leading zero, below
// 2^31. Python's int() would also take "+1", " 1" and "1_0"; they are refused here.
std::optional<int32_t> parse_token_id(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  int64_t id = 0;
  for (const char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');  // at most 10 digits: no overflow
  }
  if (id > INT32_MAX) return std::nullopt;
  return static_cast<int32_t>(id);
}

}  // namespace

std::vector<ApiMessage> read_messages(const Json& value, const ParseLimits& limits) {
  if (!value.is_array()) throw_wrong_type("messages", "an array of messages", value);
  if (value.empty()) throw bad_request("`messages` must hold at least one message", "messages");
  if (value.size() > limits.max_messages) {
    throw bad_request("`messages` holds " + std::to_string(value.size()) + " messages; the most is " +
                          std::to_string(limits.max_messages),
                      "messages");
  }
  std::vector<ApiMessage> messages;
  messages.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) messages.push_back(read_message(value[i], i));
  return messages;
}

std::string read_prompt(const Json& value) {
  const std::string param = "prompt";
  const Json* text = &value;
  if (value.is_array()) {
    if (value.empty()) throw bad_request("`prompt` must not be empty", param);
    if (value[0].is_number() || value[0].is_array()) {
      throw bad_request("`prompt` as token ids is not supported; send the text", param);
    }
    if (value.size() > 1) {
      throw bad_request("`prompt` holds " + std::to_string(value.size()) + " prompts; one per request is supported",
                        param);
    }
    text = &value[0];
  }
  if (!text->is_string()) throw_wrong_type(param, "a string or an array holding one string", *text);
  if (text->get_ref<const std::string&>().empty()) throw bad_request("`prompt` must not be empty", param);
  return text->get<std::string>();
}

std::vector<std::string> read_stop(const Json& value, const ParseLimits& limits) {
  const std::string param = "stop";
  std::vector<std::string> stops;
  const auto add = [&](const Json& item) {
    if (!item.is_string()) throw_wrong_type(param, "a string or an array of strings", item);
    const std::string& text = item.get_ref<const std::string&>();
    if (text.empty()) throw bad_request("`stop` strings must not be empty", param);
    if (text.size() > limits.max_stop_bytes) {
      throw bad_request("`stop` strings must be at most " + std::to_string(limits.max_stop_bytes) +
                            " bytes; one has " + std::to_string(text.size()),
                        param);
    }
    stops.push_back(text);
  };
  if (value.is_array()) {
    if (value.size() > limits.max_stop) {
      throw bad_request("`stop` holds " + std::to_string(value.size()) + " strings; the most is " +
                            std::to_string(limits.max_stop),
                        param);
    }
    for (const Json& item : value) add(item);
  } else {
    add(value);
  }
  return stops;
}

std::map<int32_t, double> read_logit_bias(const Json& value, const ParseLimits& limits) {
  const std::string param = "logit_bias";
  if (!value.is_object()) throw_wrong_type(param, "an object mapping token ids to biases", value);
  if (value.size() > limits.max_logit_bias) {
    throw bad_request("`logit_bias` holds " + std::to_string(value.size()) + " entries; the most is " +
                          std::to_string(limits.max_logit_bias),
                      param);
  }
  std::map<int32_t, double> biases;
  for (const auto& [key, bias] : value.items()) {
    const std::optional<int32_t> token = parse_token_id(key);
    if (!token) {
      throw bad_request("`logit_bias` keys must be token ids (decimal, 0 to 2147483647); found " +
                            quote_client_text(key),
                        param);
    }
    biases[*token] = read_number(bias, param, {-100.0, 100.0});
  }
  return biases;
}

std::vector<int32_t> read_stop_token_ids(const Json& value, const ParseLimits& limits) {
  const std::string param = "stop_token_ids";
  if (!value.is_array()) throw_wrong_type(param, "an array of token ids", value);
  if (value.size() > limits.max_stop_token_ids) {
    throw bad_request("`stop_token_ids` holds " + std::to_string(value.size()) + " ids; the most is " +
                          std::to_string(limits.max_stop_token_ids),
                      param);
  }
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (const Json& item : value) ids.push_back(static_cast<int32_t>(read_integer(item, param, 0, INT32_MAX)));
  return ids;
}

}  // namespace lorakv::server::api
