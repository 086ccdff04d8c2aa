// agents/config/config_reader.cpp: the schema walk's building blocks.
#include "lorakv/agents/config/config_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace lorakv::agents::config {
namespace {

// A value as an error message shows it: short, on one line.
std::string shown(const YamlNode& node) {
  if (node.kind != YamlNode::Kind::kScalar) return node.kind_name();
  std::string text = node.scalar.substr(0, 40);
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (node.scalar.size() > 40) text += "...";
  return (node.plain ? "`" + text + "`" : "the quoted text \"" + text + "\"");
}

// A name as messages show it: at most 60 bytes, cut between characters.
std::string shortened(const std::string& name) {
  if (name.size() <= 60) return name;
  size_t cut = 57;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return name.substr(0, cut) + "...";
}

[[noreturn]] void wrong_type(const ConfigReader& r, const Field& f, const std::string& expected,
                             const std::string& hint = "") {
  r.fail(f.node.mark, f.path, "`" + f.path + "` must be " + expected + ", found " + shown(f.node), hint);
}

// Optimal string alignment distance (a swap of two neighbours counts once), ignoring case.
size_t edit_distance(const std::string& a, const std::string& b) {
  const auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

template <typename T>
bool parse_whole(const std::string& text, T& value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

}  // namespace

void ConfigReader::fail(SourceMark mark, const std::string& key_path, const std::string& message,
                        const std::string& hint) const {
  throw ConfigFileError(file_, mark, key_path, message, hint);
}

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string item_path(const std::string& parent, size_t index) { return parent + "[" + std::to_string(index) + "]"; }

std::string join_names(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  constexpr size_t kLongest = 64;  // no suggestion for longer words: the distance is quadratic
  std::string best;
  size_t best_distance = std::string::npos;
  if (word.size() > kLongest) return "";
  for (const std::string& candidate : candidates) {
    const size_t gap = candidate.size() > word.size() ? candidate.size() - word.size() : word.size() - candidate.size();
    if (candidate.size() > kLongest || gap > std::max<size_t>(1, candidate.size() / 3)) continue;
    const size_t distance = edit_distance(word, candidate);
    if (distance <= std::max<size_t>(1, candidate.size() / 3) && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best.empty() ? "" : "`" + best + "`";
}

MapReader::MapReader(const ConfigReader& reader, const Field& field, std::vector<std::string> keys)
    : reader_(reader), field_(field) {
  const std::string name = field.path.empty() ? "the file" : "`" + field.path + "`";
  if (field.node.kind != YamlNode::Kind::kMap) {
    const char* const top_hint = "a session config is a YAML map with model, agents and workflow";
    wrong_type(reader, field, "a map of keys", field.path.empty() ? top_hint : "");
  }
  for (const YamlEntry& entry : field.node.entries) {
    if (std::find(keys.begin(), keys.end(), entry.key) == keys.end()) {
      const std::string where = field.path.empty() ? "at the top level" : "in `" + field.path + "`";
      const std::string near = nearest_name(entry.key, keys);
      const std::string key = shortened(entry.key);
      reader.fail(entry.key_mark, child_path(field.path, key),
                  "unknown key `" + key + "` " + where + (near.empty() ? "" : "; did you mean " + near + "?"),
                  "the keys of " + name + " are " + join_names(keys));
    }
    reader.marks().set(child_path(field.path, entry.key), entry.key_mark);
  }
}

const YamlNode* MapReader::find(const std::string& key) const {
  for (const YamlEntry& entry : field_.node.entries) {
    if (entry.key == key) return entry.value.kind == YamlNode::Kind::kNull ? nullptr : &entry.value;
  }
  return nullptr;
}

std::string MapReader::path(const std::string& key) const { return child_path(field_.path, key); }

Field MapReader::get(const std::string& key) const { return get(key, ""); }

Field MapReader::get(const std::string& key, const std::string& hint) const {
  const YamlNode* node = find(key);
  if (node == nullptr) {
    const std::string owner = field_.path.empty() ? "the file" : "`" + field_.path + "`";
    reader_.fail(field_.node.mark, path(key), owner + " needs the key `" + key + "`", hint);
  }
  return Field{*node, path(key)};
}

std::string read_text(const ConfigReader& r, const Field& f) {
  if (f.node.kind == YamlNode::Kind::kNull) return "";
  if (f.node.kind != YamlNode::Kind::kScalar) wrong_type(r, f, "text", "quote it if it holds a `: ` or starts with [ or {");
  return f.node.scalar;
}

int64_t read_int(const ConfigReader& r, const Field& f, int64_t min, int64_t max, const std::string& meaning) {
  int64_t value = 0;
  if (f.node.kind != YamlNode::Kind::kScalar || !f.node.plain || !parse_whole(f.node.scalar, value)) {
    wrong_type(r, f, "a whole number" + (meaning.empty() ? "" : " (" + meaning + ")"),
               f.node.plain ? "" : "write the number without quotes");
  }
  if (value < min || value > max) {
    const std::string range = max == std::numeric_limits<int64_t>::max()
                                  ? (min == 0 ? "0 or more" : min == 1 ? "positive" : std::to_string(min) + " or more")
                                  : "between " + std::to_string(min) + " and " + std::to_string(max);
    r.fail(f.node.mark, f.path, "`" + f.path + "` must be " + range + ", found " + f.node.scalar, meaning);
  }
  return value;
}

uint64_t read_uint64(const ConfigReader& r, const Field& f) {
  uint64_t value = 0;
  const bool digits = f.node.kind == YamlNode::Kind::kScalar && !f.node.scalar.empty() &&
                      std::isdigit(static_cast<unsigned char>(f.node.scalar[0]));
  if (!digits || !f.node.plain || !parse_whole(f.node.scalar, value)) {
    wrong_type(r, f, "a whole number from 0 to 18446744073709551615");
  }
  return value;
}

double read_number(const ConfigReader& r, const Field& f, double min, double max, bool open_min,
                   const std::string& meaning) {
  double value = 0;
  if (f.node.kind != YamlNode::Kind::kScalar || !f.node.plain || !parse_whole(f.node.scalar, value) ||
      !std::isfinite(value)) {
    wrong_type(r, f, "a number", f.node.plain ? meaning : "write the number without quotes");
  }
  if (value < min || value > max || (open_min && value == min)) {
    r.fail(f.node.mark, f.path, "`" + f.path + "` is out of range: " + f.node.scalar, meaning);
  }
  return value;
}

int64_t read_byte_size(const ConfigReader& r, const Field& f) {
  const std::string hint = "bytes as a whole number, or a number with KiB, MiB or GiB, e.g. 512MiB";
  if (f.node.kind != YamlNode::Kind::kScalar) wrong_type(r, f, "a size", hint);
  const std::string& text = f.node.scalar;
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  double number = 0;
  if (end == 0 || !parse_whole(text.substr(0, end), number)) wrong_type(r, f, "a size", hint);
  size_t unit_start = end;
  while (unit_start < text.size() && text[unit_start] == ' ') ++unit_start;
  const std::string unit = text.substr(unit_start);
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}};
  auto it = std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == unit; });
  if (it == units.end()) wrong_type(r, f, "a size", hint);
  const double bytes = number * it->second;
  if (!(bytes >= 1) || bytes != std::floor(bytes) || bytes > 9.0e18) {
    r.fail(f.node.mark, f.path, "`" + f.path + "` must be a positive whole number of bytes, found " + text, hint);
  }
  return static_cast<int64_t>(bytes);
}

void require_at_most(const ConfigReader& r, const Field& f, size_t count, size_t limit, const std::string& what) {
  if (count > limit) {
    r.fail(f.node.mark, f.path, "`" + f.path + "` holds " + std::to_string(count) + " " + what + ", more than " +
                                    std::to_string(limit),
           "a session needs far fewer");
  }
}

std::vector<std::string> read_text_list(const ConfigReader& r, const Field& f, bool non_empty, size_t limit) {
  if (f.node.kind != YamlNode::Kind::kSequence) wrong_type(r, f, "a list of texts", "write [\"a\", \"b\"]");
  require_at_most(r, f, f.node.items.size(), limit, "entries");
  std::vector<std::string> texts;
  for (size_t i = 0; i < f.node.items.size(); ++i) {
    const Field item{f.node.items[i], item_path(f.path, i)};
    if (item.node.kind != YamlNode::Kind::kScalar) wrong_type(r, item, "text");
    if (non_empty && item.node.scalar.empty()) r.fail(item.node.mark, item.path, "`" + item.path + "` is empty");
    texts.push_back(item.node.scalar);
  }
  return texts;
}

std::string read_choice(const ConfigReader& r, const Field& f, const std::vector<std::string>& choices) {
  const std::string value = read_text(r, f);
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    const std::string near = nearest_name(value, choices);
    r.fail(f.node.mark, f.path,
           "`" + f.path + "` is `" + value + "`" + (near.empty() ? "" : "; did you mean " + near + "?"),
           "choose one of " + join_names(choices));
  }
  return value;
}

}  // namespace lorakv::agents::config
