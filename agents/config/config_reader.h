// agents/config/config_reader.h: reading the YAML tree against the schema: maps with a
// fixed set of keys (an unknown key gets the nearest known one suggested), typed scalars
// with ranges, lists, byte sizes. Every refusal is a ConfigFileError at the value's mark
// naming its key path; every key read is recorded in the config's marks.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lorakv/agents/config/session_config.h"
#include "lorakv/agents/config/yaml_tree.h"

namespace lorakv::agents::config {

// What a load knows beyond the tree: the file's name for errors, the folder relative paths
// start at, and where the marks go.
class ConfigReader {
 public:
  ConfigReader(std::string file, std::string base_dir, ConfigMarks& marks)
      : file_(std::move(file)), base_dir_(std::move(base_dir)), marks_(marks) {}

  const std::string& file() const { return file_; }
  const std::string& base_dir() const { return base_dir_; }
  ConfigMarks& marks() const { return marks_; }
  [[noreturn]] void fail(SourceMark mark, const std::string& key_path, const std::string& message,
                         const std::string& hint = "") const;

 private:
  std::string file_, base_dir_;
  ConfigMarks& marks_;
};

// A value and the key path it was found at.
struct Field {
  const YamlNode& node;
  std::string path;
};

// A map checked against its allowed keys; records each key's mark under its path.
class MapReader {
 public:
  // Throws when `field` is not a map, or has a key not in `keys` (suggesting the nearest).
  MapReader(const ConfigReader& reader, const Field& field, std::vector<std::string> keys);

  // The key's value, or null when absent or written as null (`key:` or `key: ~`).
  const YamlNode* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  Field get(const std::string& key) const;  // present (refused with `hint` otherwise)
  Field get(const std::string& key, const std::string& hint) const;
  std::string path(const std::string& key) const;  // "cache.writer"
  const std::vector<YamlEntry>& entries() const { return field_.node.entries; }
  const Field& field() const { return field_; }

 private:
  const ConfigReader& reader_;
  Field field_;
};

// The key path of one entry of a map read by name ("agents.planner"), or of a list item.
std::string child_path(const std::string& parent, const std::string& key);
std::string item_path(const std::string& parent, size_t index);

// Typed values. Each refuses another kind of node with the expected type named.
std::string read_text(const ConfigReader& r, const Field& f);
int64_t read_int(const ConfigReader& r, const Field& f, int64_t min, int64_t max = std::numeric_limits<int64_t>::max(),
                 const std::string& meaning = "");
uint64_t read_uint64(const ConfigReader& r, const Field& f);
// A finite number in [min, max]; `open_min`: min itself is excluded.
double read_number(const ConfigReader& r, const Field& f, double min, double max, bool open_min,
                   const std::string& meaning);
// An integer number of bytes, or a number with KiB, MiB or GiB ("512MiB", "1.5 GiB"); > 0.
int64_t read_byte_size(const ConfigReader& r, const Field& f);
// How many agents, adapters, tools, tasks or names in a list a config may hold: far more
// than a session uses, and few enough that checking references stays cheap.
constexpr size_t kMaxEntries = 1000;

// Refuses `count` above `limit` ("`agents` holds 5000 entries, more than 1000").
void require_at_most(const ConfigReader& r, const Field& f, size_t count, size_t limit, const std::string& what);

// A list of texts (each non-empty when `non_empty`, at most `limit`); a single text is refused.
std::vector<std::string> read_text_list(const ConfigReader& r, const Field& f, bool non_empty,
                                        size_t limit = kMaxEntries);
// One of `choices`; refuses anything else, listing them.
std::string read_choice(const ConfigReader& r, const Field& f, const std::vector<std::string>& choices);

// "`writer`" when one of `candidates` is within a small edit distance of `word`, else "".
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);
std::string join_names(const std::vector<std::string>& names);  // "a, b, c"

}  // namespace lorakv::agents::config
