// agents/config/yaml_tree.h: a YAML document read into a plain tree with a mark on every
// node and key, under limits that make hostile text end in a ConfigFileError: no anchors
// or aliases (yaml-cpp shares aliased nodes, so a walk of a "billion laughs" file would
// expand it), nesting, node count and scalar size bounded while the parser runs (it
// reports events as it descends, so it never recurses past the limit), one document,
// plain keys, no duplicate keys, no tags.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lorakv/agents/config/config_error.h"
#include "lorakv/agents/config/source_text.h"

namespace lorakv::agents::config {

struct YamlLimits {
  int max_depth = 32;                        // nested maps and lists (a config needs 5)
  size_t max_nodes = 100000;                 // every scalar, list and map
  size_t max_scalar_bytes = size_t{128} << 10;
};

struct YamlEntry;

struct YamlNode {
  enum class Kind { kNull, kScalar, kSequence, kMap };
  Kind kind = Kind::kNull;
  SourceMark mark;
  std::string scalar;   // kScalar: the text
  bool plain = false;   // kScalar: unquoted (only a plain scalar can be a number)
  std::vector<YamlNode> items;     // kSequence
  std::vector<YamlEntry> entries;  // kMap, in file order

  const char* kind_name() const;  // "nothing (null)", "text", "a list", "a map"
};

struct YamlEntry {
  std::string key;
  SourceMark key_mark;
  YamlNode value;
};

// Parses the one document of `source`. Throws ConfigFileError with the place of the
// problem: invalid YAML, a limit, an anchor, alias or tag, a key that is not plain text,
// a duplicate key, a second document, no document at all.
YamlNode parse_yaml(const SourceText& source, const YamlLimits& limits = {});

}  // namespace lorakv::agents::config
