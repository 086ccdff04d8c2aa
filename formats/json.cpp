// formats/json.cpp: the strict JSON parser (recursive descent with a depth limit, so a
// nesting bomb is an error, not a stack overflow), typed accessors and the printer.
// Parse errors carry line:column (columns count characters, not bytes) and an excerpt.
#include "lorakv/formats/json.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "lorakv/common/errors.h"
#include "lorakv/formats/unicode.h"

namespace lorakv::formats {

const char* json_type_name(JsonType type) {
  switch (type) {
    case JsonType::kNull: return "null";
    case JsonType::kBool: return "bool";
    case JsonType::kNumber: return "number";
    case JsonType::kString: return "string";
    case JsonType::kArray: return "array";
    case JsonType::kObject: return "object";
  }
  return "unknown";
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the well-formed UTF-8 sequence at text[pos] (Unicode Table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when it is malformed.
size_t utf8_valid_length(std::string_view text, size_t pos) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(text[pos + k]); };
  const uint8_t lead = b(0);
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() - pos < len || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  return len;
}

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<uint8_t>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string format_double(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  std::string s(buf, r.ptr);
  // Keep a float a float when printed and read back ("2.0", not "2").
  if (s.find_first_of(".eE") == std::string::npos && std::isfinite(v)) s += ".0";
  return s;
}

}  // namespace

// One step of a value's key path: a member name or an array index, after its container's
// path. Values share their ancestors' nodes, so a long key is stored once, not copied
// into the path of every value beneath it (which would let a small document allocate
// without bound).
struct JsonPathNode {
  JsonPathPtr parent;
  std::string key;  // member name (when !is_index)
  size_t index = 0;
  bool is_index = false;
};

namespace {

JsonPathPtr member_path(const JsonPathPtr& parent, const std::string& key) {
  return std::make_shared<const JsonPathNode>(JsonPathNode{parent, key, 0, false});
}

JsonPathPtr element_path(const JsonPathPtr& parent, size_t index) {
  return std::make_shared<const JsonPathNode>(JsonPathNode{parent, "", index, true});
}

// "" for the root, "a.b", "a[2].c".
std::string path_string(const JsonPathNode* node) {
  std::vector<const JsonPathNode*> steps;
  for (; node != nullptr; node = node->parent.get()) steps.push_back(node);
  std::string out;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if ((*it)->is_index) {
      out += "[" + std::to_string((*it)->index) + "]";
    } else {
      out += out.empty() ? (*it)->key : "." + (*it)->key;
    }
  }
  return out;
}

}  // namespace

// The parser: a cursor over the text; every value is built with its key path.
class JsonParser {
 public:
  JsonParser(std::string_view text, const JsonParseOptions& options)
      : text_(text), options_(options), source_(std::make_shared<const std::string>(options.source)) {}

  JsonValue parse_document() {
    if (text_.size() > options_.max_bytes) {
      throw ConfigError("JSON document too large", {options_.source, "", "at most " + std::to_string(options_.max_bytes) +
                                                    " bytes", std::to_string(text_.size()) + " bytes", ""});
    }
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // a UTF-8 byte order mark
    skip_ws();
    JsonValue root = parse_value(nullptr, 0);
    skip_ws();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value", "end of input", nullptr);
    return root;
  }

 private:
  JsonValue parse_value(const JsonPathPtr& path, size_t depth) {
    if (pos_ >= text_.size()) fail("unexpected end of input", "a value", path);
    JsonValue v;
    const char c = text_[pos_];
    if (c == '{') v = parse_object(path, depth);
    else if (c == '[') v = parse_array(path, depth);
    else if (c == '"') v = JsonValue::make_string(parse_string(path));
    else if (c == '-' || is_digit(c)) v = parse_number(path);
    else if (consume_word("true")) v = JsonValue::make_bool(true);
    else if (consume_word("false")) v = JsonValue::make_bool(false);
    else if (consume_word("null")) v = JsonValue();
    else fail("invalid value", "an object, array, string, number, true, false or null", path);
    v.path_ = path;
    v.source_ = source_;
    return v;
  }

  JsonValue parse_object(const JsonPathPtr& path, size_t depth) {
    enter(depth, path);
    ++pos_;  // '{'
    JsonObject obj;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return JsonValue::make_object(std::move(obj));
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') fail(peek() == '}' ? "trailing comma in object" : "expected a member name", "a string key", path);
      const size_t key_pos = pos_;
      std::string key = parse_string(path);
      skip_ws();
      if (peek() != ':') fail("expected ':' after the member name", "':'", path);
      ++pos_;
      skip_ws();
      JsonValue value = parse_value(member_path(path, key), depth + 1);
      auto [it, fresh] = obj.index.emplace(key, obj.members.size());
      if (fresh) {
        obj.members.emplace_back(std::move(key), std::move(value));
      } else if (options_.allow_duplicate_keys) {
        obj.members[it->second].second = std::move(value);
      } else {
        pos_ = key_pos;
        fail("duplicate key '" + key + "'", "unique keys in an object", path, "a second '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == '}') { ++pos_; break; }
      fail("expected ',' or '}' in object", "',' or '}'", path);
    }
    return JsonValue::make_object(std::move(obj));
  }

  JsonValue parse_array(const JsonPathPtr& path, size_t depth) {
    enter(depth, path);
    ++pos_;  // '['
    std::vector<JsonValue> items;
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return JsonValue::make_array(std::move(items));
    }
    for (;;) {
      skip_ws();
      if (peek() == ']') fail("trailing comma in array", "a value", path);
      items.push_back(parse_value(element_path(path, items.size()), depth + 1));
      skip_ws();
      if (peek() == ',') { ++pos_; continue; }
      if (peek() == ']') { ++pos_; break; }
      fail("expected ',' or ']' in array", "',' or ']'", path);
    }
    return JsonValue::make_array(std::move(items));
  }

  std::string parse_string(const JsonPathPtr& path) {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("unterminated string", "a closing '\"'", path);
      const uint8_t c = static_cast<uint8_t>(text_[pos_]);
      if (c == '"') { ++pos_; return out; }
      if (c < 0x20) fail("control character in string (write it as an escape)", "a printable character", path);
      if (c == '\\') {
        append_escape(out, path);
      } else if (c < 0x80) {
        out += static_cast<char>(c);
        ++pos_;
      } else {
        const size_t len = utf8_valid_length(text_, pos_);
        if (len == 0) fail("invalid UTF-8 in string", "well-formed UTF-8", path);
        out.append(text_.substr(pos_, len));
        pos_ += len;
      }
    }
  }

  void append_escape(std::string& out, const JsonPathPtr& path) {
    // Positions in errors point at the backslash.
    if (pos_ + 1 >= text_.size()) fail("unterminated string", "an escape character", path);
    static const char kEscapes[] = "\"\\/bfnrt";
    static const char kDecoded[] = "\"\\/\b\f\n\r\t";
    const char e = text_[pos_ + 1];
    const char* simple = e == '\0' ? nullptr : std::strchr(kEscapes, e);
    if (simple != nullptr) {
      out += kDecoded[simple - kEscapes];
      pos_ += 2;
      return;
    }
    if (e != 'u') fail("invalid escape '\\" + std::string(1, e) + "'", "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX", path);
    const size_t start = pos_;
    uint32_t cpt = read_hex4(path);
    const auto surrogate_error = [&](const char* reason, const char* expected) {
      pos_ = start;
      fail(reason, expected, path);
    };
    if (cpt >= 0xDC00 && cpt <= 0xDFFF) surrogate_error("lone low surrogate", "a high surrogate before it");
    if (cpt >= 0xD800 && cpt <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u") surrogate_error("lone high surrogate", "a \\uDC00-\\uDFFF escape after it");
      const uint32_t low = read_hex4(path);
      if (low < 0xDC00 || low > 0xDFFF) surrogate_error("high surrogate not followed by a low one", "\\uDC00-\\uDFFF");
      cpt = 0x10000 + ((cpt - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cpt);
  }

  // Reads "\uXXXX" at pos_.
  uint32_t read_hex4(const JsonPathPtr& path) {
    uint32_t v = 0;
    for (size_t k = 2; k < 6; ++k) {
      const char h = pos_ + k < text_.size() ? text_[pos_ + k] : '\0';
      const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (d < 0) fail("invalid \\u escape", "four hex digits", path);
      v = v * 16 + static_cast<uint32_t>(d);
    }
    pos_ += 6;
    return v;
  }

  JsonValue parse_number(const JsonPathPtr& path) {
    const size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (is_digit(peek())) fail("leading zeros are not allowed in numbers", "a digit other than 0 first", path);
    } else if (is_digit(peek())) {
      while (is_digit(peek())) ++pos_;
    } else {
      fail("invalid number", "a digit", path);
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!is_digit(peek())) fail("invalid number: no digit after '.'", "a digit", path);
      while (is_digit(peek())) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) fail("invalid number: no digit in the exponent", "a digit", path);
      while (is_digit(peek())) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    std::optional<int64_t> integer;
    if (integral) {
      int64_t i = 0;
      if (std::from_chars(first, last, i).ec == std::errc()) integer = i;
    }
    double d = 0;
    if (std::from_chars(first, last, d).ec == std::errc::result_out_of_range) {
      // from_chars leaves `d` alone; strtod tells overflow (an error) from underflow (~0).
      d = std::strtod(std::string(first, last).c_str(), nullptr);
      if (std::isinf(d)) {
        pos_ = start;
        fail("number out of range", "a magnitude below 1.8e308", path, std::string(first, last));
      }
    }
    return JsonValue::make_number(d, integer);
  }

  bool consume_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  void enter(size_t depth, const JsonPathPtr& path) {
    if (depth >= options_.max_depth) {
      fail("nesting too deep", "at most " + std::to_string(options_.max_depth) + " nested arrays and objects", path);
    }
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < text_.size() && is_ws(text_[pos_])) ++pos_;
  }

  std::string describe_char(size_t pos) const {
    if (pos >= text_.size()) return "end of input";
    const uint8_t c = static_cast<uint8_t>(text_[pos]);
    if (c >= 0x20 && c < 0x80) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02X", static_cast<unsigned>(c));
    return buf;
  }

  // `found` defaults to the character at pos_.
  [[noreturn]] void fail(const std::string& reason, const std::string& expected, const JsonPathPtr& path,
                         std::string found = "") const {
    // Line and column (in characters) of pos_, and the text around it on that line.
    size_t line = 1, line_start = 0;
    for (size_t k = 0; k < pos_ && k < text_.size(); ++k) {
      if (text_[k] == '\n') {
        ++line;
        line_start = k + 1;
      }
    }
    size_t column = 1;
    for (size_t k = line_start; k < pos_; ++k) column += (static_cast<uint8_t>(text_[k]) & 0xC0) != 0x80;
    const auto continuation = [&](size_t k) { return k < text_.size() && (static_cast<uint8_t>(text_[k]) & 0xC0) == 0x80; };
    size_t from = pos_ > line_start + 24 ? pos_ - 24 : line_start;
    while (continuation(from)) ++from;  // cut on character boundaries
    size_t to = std::min(text_.size(), pos_ + 16);
    while (to > from && continuation(to)) --to;  // stop at `from`: the text may start with stray bytes
    std::string excerpt;
    for (size_t k = from; k < to && text_[k] != '\n'; ++k) excerpt += static_cast<uint8_t>(text_[k]) < 0x20 ? ' ' : text_[k];
    if (found.empty()) found = describe_char(pos_);
    std::ostringstream msg;
    msg << "invalid JSON: " << reason << " at line " << line << ", column " << column << " (near '" << excerpt << "')";
    throw ConfigError(msg.str(), {options_.source, path_string(path.get()), expected, found, ""});
  }

  std::string_view text_;
  const JsonParseOptions& options_;
  std::shared_ptr<const std::string> source_;
  size_t pos_ = 0;
};

JsonValue parse_json(std::string_view text, const JsonParseOptions& options) {
  return JsonParser(text, options).parse_document();
}

JsonValue parse_json_file(const std::string& path, JsonParseOptions options) {
  if (options.source.empty()) options.source = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError("cannot open JSON file", {path, "", "a readable file", std::strerror(errno), "check the path"});
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > options.max_bytes) {
    throw ConfigError("JSON file too large", {path, "", "at most " + std::to_string(options.max_bytes) + " bytes",
                                              std::to_string(size) + " bytes", ""});
  }
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) throw ConfigError("cannot read JSON file", {path, "", "", std::strerror(errno), ""});
  return parse_json(text, options);
}

// ---- values ----

JsonValue JsonValue::make_bool(bool b) { JsonValue v; v.data_ = b; return v; }
JsonValue JsonValue::make_number(double d, std::optional<int64_t> integer) {
  JsonValue v;
  v.data_ = JsonNumber{d, integer};
  return v;
}
JsonValue JsonValue::make_string(std::string s) { JsonValue v; v.data_ = std::move(s); return v; }
JsonValue JsonValue::make_array(std::vector<JsonValue> items) { JsonValue v; v.data_ = std::move(items); return v; }
JsonValue JsonValue::make_object(JsonObject object) { JsonValue v; v.data_ = std::move(object); return v; }

std::string JsonValue::path() const { return path_string(path_.get()); }

std::string JsonValue::display_path() const {
  std::string p = path();
  return p.empty() ? "(root)" : p;
}

const std::string& JsonValue::source() const {
  static const std::string kNone;
  return source_ ? *source_ : kNone;
}

std::string JsonValue::describe() const {
  switch (type()) {
    case JsonType::kNull: return "null";
    case JsonType::kBool: return as_bool() ? "bool true" : "bool false";
    case JsonType::kNumber: return "number " + to_string();
    case JsonType::kString: {
      const std::string& s = std::get<std::string>(data_);
      std::string out = "string ";
      append_escaped(out, s.size() > 40 ? s.substr(0, 40) + "..." : s);
      return out;
    }
    case JsonType::kArray: return "array[" + std::to_string(size()) + "]";
    case JsonType::kObject: return "object{" + std::to_string(size()) + "}";
  }
  return "unknown";
}

void JsonValue::type_error(const std::string& expected) const {
  throw ConfigError("value has the wrong type", {source(), display_path(), expected, describe(), ""});
}

bool JsonValue::is_integer() const {
  const JsonNumber* n = std::get_if<JsonNumber>(&data_);
  if (n == nullptr) return false;
  return n->integer.has_value() || (std::trunc(n->value) == n->value && std::fabs(n->value) <= 9007199254740992.0);
}

bool JsonValue::as_bool() const {
  if (!is_bool()) type_error("a bool");
  return std::get<bool>(data_);
}

double JsonValue::as_double() const {
  if (!is_number()) type_error("a number");
  return std::get<JsonNumber>(data_).value;
}

int64_t JsonValue::as_int() const {
  if (!is_number()) type_error("an integer");
  const JsonNumber& n = std::get<JsonNumber>(data_);
  if (n.integer) return *n.integer;
  if (!is_integer()) type_error(std::trunc(n.value) == n.value ? "an integer within int64 (exactly, up to 2^53 when written "
                                                                 "as a float)" : "an integer");
  return static_cast<int64_t>(n.value);
}

const JsonNumber& JsonValue::as_number() const {
  if (!is_number()) type_error("a number");
  return std::get<JsonNumber>(data_);
}

const std::string& JsonValue::as_string() const {
  if (!is_string()) type_error("a string");
  return std::get<std::string>(data_);
}

const std::vector<JsonValue>& JsonValue::as_array() const {
  if (!is_array()) type_error("an array");
  return std::get<std::vector<JsonValue>>(data_);
}

const std::vector<std::pair<std::string, JsonValue>>& JsonValue::as_object() const {
  if (!is_object()) type_error("an object");
  return std::get<JsonObject>(data_).members;
}

size_t JsonValue::size() const {
  if (is_array()) return std::get<std::vector<JsonValue>>(data_).size();
  if (is_object()) return std::get<JsonObject>(data_).members.size();
  type_error("an array or object");
}

const JsonValue& JsonValue::at(size_t index) const {
  const auto& items = as_array();
  if (index >= items.size()) {
    throw ConfigError("array index out of range", {source(), display_path() + "[" + std::to_string(index) + "]",
                                                   "an index below " + std::to_string(items.size()), std::to_string(index), ""});
  }
  return items[index];
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (!is_object()) type_error("an object");
  const JsonObject& obj = std::get<JsonObject>(data_);
  auto it = obj.index.find(std::string(key));
  return it == obj.index.end() ? nullptr : &obj.members[it->second].second;
}

const JsonValue& JsonValue::at(std::string_view key) const {
  const JsonValue* v = find(key);
  if (v == nullptr) {
    const std::string child = path_string(member_path(path_, std::string(key)).get());
    throw ConfigError("required key is missing", {source(), child, "a value", "nothing", ""});
  }
  return *v;
}

std::optional<std::string> JsonValue::find_string(std::string_view key) const {
  const JsonValue* v = find(key);
  return v == nullptr || v->is_null() ? std::nullopt : std::optional<std::string>(v->as_string());
}
std::optional<int64_t> JsonValue::find_int(std::string_view key) const {
  const JsonValue* v = find(key);
  return v == nullptr || v->is_null() ? std::nullopt : std::optional<int64_t>(v->as_int());
}
std::optional<double> JsonValue::find_double(std::string_view key) const {
  const JsonValue* v = find(key);
  return v == nullptr || v->is_null() ? std::nullopt : std::optional<double>(v->as_double());
}
std::optional<bool> JsonValue::find_bool(std::string_view key) const {
  const JsonValue* v = find(key);
  return v == nullptr || v->is_null() ? std::nullopt : std::optional<bool>(v->as_bool());
}

namespace {
void print(const JsonValue& v, int indent, int level, std::string& out) {
  const auto newline = [&](int lvl) {
    if (indent >= 0) out += '\n' + std::string(static_cast<size_t>(indent * lvl), ' ');
  };
  const char* sep = indent >= 0 ? "," : ", ";
  switch (v.type()) {
    case JsonType::kNull: out += "null"; break;
    case JsonType::kBool: out += v.as_bool() ? "true" : "false"; break;
    case JsonType::kNumber: {
      const JsonNumber& n = v.as_number();
      out += n.integer ? std::to_string(*n.integer) : format_double(n.value);
      break;
    }
    case JsonType::kString: append_escaped(out, v.as_string()); break;
    case JsonType::kArray: {
      out += '[';
      for (size_t k = 0; k < v.size(); ++k) {
        out += k ? sep : "";
        newline(level + 1);
        print(v.at(k), indent, level + 1, out);
      }
      if (v.size() > 0) newline(level);
      out += ']';
      break;
    }
    case JsonType::kObject: {
      out += '{';
      bool first = true;
      for (const auto& [key, member] : v.as_object()) {
        out += first ? "" : sep;
        first = false;
        newline(level + 1);
        append_escaped(out, key);
        out += ": ";
        print(member, indent, level + 1, out);
      }
      if (v.size() > 0) newline(level);
      out += '}';
      break;
    }
  }
}
}  // namespace

std::string JsonValue::to_string(int indent) const {
  std::string out;
  print(*this, indent, 0, out);
  return out;
}

}  // namespace lorakv::formats
