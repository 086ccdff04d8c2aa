// server/api/api_json_reader.cpp: the body parsed under a depth limit, and the typed value
// readers of the request parser.
#include "lorakv/server/api/api_json_reader.h"

#include <cmath>
#include <cstdio>

#include "lorakv/server/api/api_error.h"

namespace lorakv::server::api {
namespace {

constexpr size_t kMaxQuotedBytes = 40;
constexpr size_t kMaxSyntaxMessageBytes = 160;

std::string backticked(const std::string& param) { return "`" + param + "`"; }

// nlohmann's own description of a syntax error, without what could hold client bytes.
// Its message reads "[json.exception.parse_error.101] parse error at line L, column C:
// syntax error while parsing value - <what>; last read: '<the token so far>'...": the token
// can be the whole of a long string, invalid UTF-8 included, so everything from "; last
// read" on is dropped; the rest is nlohmann's fixed wording (kept to printable ASCII anyway).
std::string syntax_error_description(const std::string& what) {
  size_t start = what.find("column ");
  start = start == std::string::npos ? 0 : what.find(": ", start);
  start = start == std::string::npos ? 0 : start + 2;
  const size_t end = what.find("; last read:", start);
  std::string description = what.substr(start, end == std::string::npos ? std::string::npos : end - start);
  if (description.size() > kMaxSyntaxMessageBytes) description.resize(kMaxSyntaxMessageBytes);
  for (char& c : description) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return description;
}

// A bound of an interval as a reader expects to see it: 2, 0.5, -100.
std::string format_bound(double bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", bound);
  return text;
}

}  // namespace

Json parse_json_object(std::string_view body, int max_depth) {
  // depth: the containers around the value the event is about; the body's object starts at
  // 0, so a container starting at depth d is nesting level d + 1. Throwing here stops the
  // parser before it reads further.
  const Json::parser_callback_t refuse_deep_nesting = [max_depth](int depth, Json::parse_event_t event, Json&) {
    const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    if (opens && depth >= max_depth) {
      throw bad_request("the request body nests deeper than " + std::to_string(max_depth) + " levels");
    }
    return true;
  };
  Json parsed;
  try {
    parsed = Json::parse(body.begin(), body.end(), refuse_deep_nesting);
  } catch (const Json::parse_error& e) {
    throw bad_request("the request body is not valid JSON: " + syntax_error_description(e.what()) + " (at byte " +
                      std::to_string(e.byte) + ")");
  } catch (const Json::out_of_range&) {  // 406: a number beyond a double (1e400)
    throw bad_request("the request body holds a number out of range (beyond a 64-bit float)");
  } catch (const Json::exception&) {
    throw bad_request("the request body is not valid JSON");
  }
  if (!parsed.is_object()) {
    throw bad_request(std::string("the request body must be a JSON object; found ") + json_type_name(parsed));
  }
  return parsed;
}

const char* json_type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a value";
  }
}

std::string utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // A continuation byte (10xxxxxx) at the cut belongs to the sequence before it.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut));
}

std::string quote_client_text(std::string_view text) {
  const std::string kept = utf8_prefix(text, kMaxQuotedBytes);
  std::string quoted = Json(kept).dump(-1, ' ', false, Json::error_handler_t::replace);
  if (kept.size() < text.size()) quoted += "...";
  return quoted;
}

void throw_wrong_type(const std::string& param, const std::string& expected, const Json& found) {
  throw bad_request(backticked(param) + " must be " + expected + "; found " + json_type_name(found), param);
}

std::string read_string(const Json& value, const std::string& param) {
  if (!value.is_string()) throw_wrong_type(param, "a string", value);
  return value.get<std::string>();
}

bool read_bool(const Json& value, const std::string& param) {
  if (!value.is_boolean()) throw_wrong_type(param, "a boolean", value);
  return value.get<bool>();
}

int64_t read_integer(const Json& value, const std::string& param, int64_t min, int64_t max) {
  const auto out_of_range = [&] {
    return bad_request(backticked(param) + " must be an integer from " + std::to_string(min) + " to " +
                           std::to_string(max) + "; found " + value.dump(),
                       param);
  };
  int64_t integer = 0;
  if (value.is_number_unsigned()) {  // nlohmann keeps every non-negative integer unsigned
    const uint64_t unsigned_value = value.get<uint64_t>();
    if (unsigned_value > static_cast<uint64_t>(INT64_MAX)) throw out_of_range();
    integer = static_cast<int64_t>(unsigned_value);
  } else if (value.is_number_integer()) {
    integer = value.get<int64_t>();
  } else if (value.is_number_float()) {
    const double number = value.get<double>();  // finite: the parser refuses overflow
    if (number != std::trunc(number)) {
      throw bad_request(backticked(param) + " must be an integer; found " + value.dump(), param);
    }
    // Beyond 2^53 a float no longer holds every integer: the client's digits may have been
    // rounded (-9223372036854775809 reads as -2^63), so only smaller ones count as exact.
    // This also keeps the cast below defined.
    if (number < -0x1p53 || number > 0x1p53) {
      throw bad_request(backticked(param) + " must be an exact integer; found " + value.dump() +
                            " (a float beyond 2^53 is rounded)",
                        param);
    }
    integer = static_cast<int64_t>(number);
  } else {
    throw_wrong_type(param, "an integer", value);
  }
  if (integer < min || integer > max) throw out_of_range();
  return integer;
}

double read_number(const Json& value, const std::string& param, const NumberRange& range) {
  if (!value.is_number()) throw_wrong_type(param, "a number", value);
  const double number = value.get<double>();
  const bool above_min = range.min_exclusive ? number > range.min : number >= range.min;
  if (!above_min || number > range.max) {
    throw bad_request(backticked(param) + " must be a number in " + (range.min_exclusive ? "(" : "[") +
                          format_bound(range.min) + ", " + format_bound(range.max) + "]; found " + value.dump(),
                      param);
  }
  return number;
}

}  // namespace lorakv::server::api
