// server/api/api_request_content.h: readers of the request fields that hold more than one
// value: chat messages, the completions prompt, stop strings, logit_bias, stop_token_ids.
// Each throws a 400 naming the param (messages[i].role...) on anything it refuses. Internal
// to server/api/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lorakv/server/api/api_json_reader.h"
#include "lorakv/server/api/api_request.h"

namespace lorakv::server::api {

// `messages`: a non-empty array of at most limits.max_messages messages.
std::vector<ApiMessage> read_messages(const Json& value, const ParseLimits& limits);

// `prompt`: a non-empty string, or an array holding exactly one.
std::string read_prompt(const Json& value);

// `stop`: a string or an array of strings.
std::vector<std::string> read_stop(const Json& value, const ParseLimits& limits);

// `logit_bias`: {"<token id>": bias in [-100, 100]}.
std::map<int32_t, double> read_logit_bias(const Json& value, const ParseLimits& limits);

// `stop_token_ids`: an array of token ids.
std::vector<int32_t> read_stop_token_ids(const Json& value, const ParseLimits& limits);

}  // namespace lorakv::server::api
