// formats/json.h: a small, strict JSON (RFC 8259) parser for Hugging Face configs,
// safetensors headers and PEFT adapter configs. Objects keep their key order (it matters
// when printing) and reject duplicate keys; strings are validated UTF-8 with every escape
// decoded (surrogate pairs too); numbers keep an exact int64 when the literal is an
// integer. Every value knows its key path ("rope_scaling.factor", "layers[3]"), so typed
// accessors throw a ConfigError that names it. Torch-free; values are immutable after
// parsing and safe to read from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace lorakv::formats {

enum class JsonType { kNull, kBool, kNumber, kString, kArray, kObject };
const char* json_type_name(JsonType type);  // "null", "bool", "number", ...

class JsonValue;
struct JsonPathNode;  // one step of a key path (json.cpp)
using JsonPathPtr = std::shared_ptr<const JsonPathNode>;

// A number: always a double; `integer` too when the literal was an integer (no fraction,
// no exponent) within int64, so ids and sizes above 2^53 stay exact.
struct JsonNumber {
  double value = 0;
  std::optional<int64_t> integer;
};

struct JsonObject {
  std::vector<std::pair<std::string, JsonValue>> members;  // in document order
  std::unordered_map<std::string, size_t> index;           // key -> position in members
};

struct JsonParseOptions {
  std::string source;                       // file path for error messages ("" for text)
  size_t max_depth = 256;                   // nesting of arrays and objects
  size_t max_bytes = size_t{512} << 20;     // whole document
  bool allow_duplicate_keys = false;        // when true, the last one wins (as Python's json)
};

class JsonValue {
 public:
  JsonValue() = default;  // null
  static JsonValue make_bool(bool b);
  static JsonValue make_number(double v, std::optional<int64_t> integer = std::nullopt);
  static JsonValue make_string(std::string s);
  static JsonValue make_array(std::vector<JsonValue> items);
  static JsonValue make_object(JsonObject object);

  JsonType type() const { return static_cast<JsonType>(data_.index()); }
  bool is_null() const { return type() == JsonType::kNull; }
  bool is_bool() const { return type() == JsonType::kBool; }
  bool is_number() const { return type() == JsonType::kNumber; }
  bool is_string() const { return type() == JsonType::kString; }
  bool is_array() const { return type() == JsonType::kArray; }
  bool is_object() const { return type() == JsonType::kObject; }
  // A number whose value is a whole number that as_int() returns exactly.
  bool is_integer() const;

  // Typed access. Each throws ConfigError naming the file, the key path, the expected and
  // the found type. as_int() accepts integer literals and whole-valued numbers up to 2^53
  // ("2.0", "1e3"); it rejects fractions and integers outside int64.
  bool as_bool() const;
  double as_double() const;
  int64_t as_int() const;
  const JsonNumber& as_number() const;
  const std::string& as_string() const;
  const std::vector<JsonValue>& as_array() const;
  const std::vector<std::pair<std::string, JsonValue>>& as_object() const;

  // Elements of an array or members of an object; throws for other types.
  size_t size() const;
  const JsonValue& at(size_t index) const;  // throws when out of range

  // Object lookup (throws when this is not an object). find() is nullptr when absent;
  // at() throws naming the missing key's path.
  const JsonValue* find(std::string_view key) const;
  const JsonValue& at(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Optional typed members: nullopt when absent, ConfigError when present but mistyped.
  // A present null counts as absent, as HF configs write "rope_scaling": null.
  std::optional<std::string> find_string(std::string_view key) const;
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<double> find_double(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;

  // Where this value sits: "" for the root, "a.b", "a[2].c". Set by the parser.
  std::string path() const;
  std::string display_path() const;
  const std::string& source() const;  // the file it came from, "" for text
  std::string describe() const;       // "string", "array[3]", "object{2}" for messages

  // Serialises back to JSON (keys in document order). indent < 0: one line.
  std::string to_string(int indent = -1) const;

 private:
  friend class JsonParser;
  [[noreturn]] void type_error(const std::string& expected) const;

  std::variant<std::monostate, bool, JsonNumber, std::string, std::vector<JsonValue>, JsonObject> data_;
  JsonPathPtr path_;  // built into a string only when asked (errors)
  std::shared_ptr<const std::string> source_;  // shared by every value of one document
};

// Parses a whole document (surrounding whitespace allowed, a leading UTF-8 BOM skipped).
// Throws ConfigError with line:column and an excerpt of the text near the error.
JsonValue parse_json(std::string_view text, const JsonParseOptions& options = {});
// Reads and parses `path`; errors name the file. Throws ConfigError when it cannot be read.
JsonValue parse_json_file(const std::string& path, JsonParseOptions options = {});

}  // namespace lorakv::formats
