// server/api/api_json_reader.h: the request body as nlohmann/json, and typed readers for its
// values. Each reader checks one value's type and range and throws a 400 (bad_request)
// naming the param otherwise, with a message that quotes at most a few dozen bytes of the
// client's text. Internal to server/api/: the public header stays free of nlohmann.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lorakv::server::api {

using Json = nlohmann::json;

// The body parsed as one JSON object. Broken JSON (nlohmann's byte position in the
// message), invalid UTF-8, a number beyond a double, nesting deeper than max_depth (checked
// as the parser opens each container, so deep input is refused before it is built) and a
// body that is not an object are 400s naming no param.
Json parse_json_object(std::string_view body, int max_depth);

// "a string", "an integer", "an array"...: for "found ..." in messages.
const char* json_type_name(const Json& value);

// The client's text for a message: JSON-quoted (control characters escaped), at most
// about 40 bytes of it, with "..." when cut; invalid UTF-8 replaced.
std::string quote_client_text(std::string_view text);

// text cut to at most max_bytes without splitting a UTF-8 sequence.
std::string utf8_prefix(std::string_view text, size_t max_bytes);

// A 400 about `param`: "`param` must be <expected>; found <the value's type>".
[[noreturn]] void throw_wrong_type(const std::string& param, const std::string& expected, const Json& found);

std::string read_string(const Json& value, const std::string& param);
bool read_bool(const Json& value, const std::string& param);

// An integer in [min, max]. 1.0 counts as the integer 1; 1.5, a float beyond 2^53 (the
// parser may have rounded the client's digits), a value beyond int64 and a boolean do not.
int64_t read_integer(const Json& value, const std::string& param, int64_t min, int64_t max);

// The interval a number must lie in; min_exclusive: (min, max] rather than [min, max].
struct NumberRange {
  double min, max;
  bool min_exclusive = false;
};
// A number (an integer or a float; never a boolean) in range.
double read_number(const Json& value, const std::string& param, const NumberRange& range);

}  // namespace lorakv::server::api
