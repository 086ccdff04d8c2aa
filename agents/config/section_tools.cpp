// agents/config/section_tools.cpp: the `tools` key: lookup tools over documents (inline,
// or a JSON-lines file) and calculators.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "lorakv/agents/config/paths.h"
#include "lorakv/agents/config/sections.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"

namespace lorakv::agents::config {
namespace {

const std::vector<std::string> kLookupKeys = {"type", "description", "documents", "documents_file"};
const std::vector<std::string> kCalculatorKeys = {"type", "description", "timeout_ms"};
const std::vector<std::string> kAnyToolKeys = {"type", "description", "documents", "documents_file", "timeout_ms"};
constexpr size_t kMaxDocumentsFileBytes = size_t{64} << 20;

const char* const kDocumentHint = "a document starts with the name it is looked up by and a colon: "
                                  "\"Dok Gramein: born 1914, lives in Gramfal.\"";

// The name a document is found by: its text before the first colon.
std::string name_of(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return "";
  const size_t first = text.find_first_not_of(" \t");
  const size_t last = text.find_last_not_of(" \t", colon - (colon > 0 ? 1 : 0));
  if (colon == 0 || first >= colon || last == std::string::npos || last < first) return "";
  return text.substr(first, last - first + 1);
}

void check_tool_name(const ConfigReader& r, const YamlEntry& entry, const std::string& path) {
  const std::string& name = entry.key;
  bool valid = !name.empty() && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) valid = valid && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (!valid) {
    r.fail(entry.key_mark, path, "the tool name `" + name + "` must be lower-case letters, digits and _",
           "the agents call a tool by its name capitalised: lookup is Lookup[...]");
  }
  if (name == "finish") {
    r.fail(entry.key_mark, path, "`finish` is the workflow's own action (Finish[answer]), not a tool", "rename the tool");
  }
}

// The documents of a JSON-lines file: one object per line with "text" (or "document", as
// assets/agentic_qa/kb_*.jsonl write it) and optionally "name".
std::vector<LookupDocument> read_documents_file(const ConfigReader& r, const Field& f, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) > kMaxDocumentsFileBytes || ec) {
    r.fail(f.node.mark, f.path, "`" + f.path + "`: '" + path + "' is over 64 MiB (or unreadable)",
           "split the knowledge base");
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<LookupDocument> documents;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const std::string where = "line " + std::to_string(number) + " of '" + path + "'";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      formats::JsonParseOptions options;
      options.source = path;
      options.max_depth = 16;
      const formats::JsonValue record = formats::parse_json(line, options);
      if (!record.is_object()) throw ConfigError("a line must hold one JSON object", {"", "", "", record.describe()});
      std::optional<std::string> text = record.find_string("text");
      if (!text) text = record.find_string("document");
      if (!text || text->empty()) throw ConfigError("the object has no \"text\" (or \"document\")");
      const std::string name = record.find_string("name").value_or(name_of(*text));
      if (name.empty()) throw ConfigError("the document has no \"name\", and its text no `name:` at its start");
      documents.push_back({name, *text});
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      r.fail(f.node.mark, f.path, "`" + f.path + "`: " + where + ": " + e.what(),
             "one JSON object per line: {\"name\": \"Dok Gramein\", \"text\": \"Dok Gramein: born 1914.\"}");
    }
  }
  if (in.bad()) r.fail(f.node.mark, f.path, "`" + f.path + "`: cannot read '" + path + "'");
  return documents;
}

void read_lookup(const ConfigReader& r, const MapReader& map, ToolSection& tool) {
  std::vector<SourceMark> marks;  // of each document in `entries`, for duplicate names
  std::vector<std::string> paths;
  if (map.has("documents")) {
    const Field documents = map.get("documents");
    tool.documents = read_text_list(r, documents, true, YamlLimits{}.max_nodes);
    for (size_t i = 0; i < tool.documents.size(); ++i) {
      const Field item{documents.node.items[i], item_path(documents.path, i)};
      const std::string name = name_of(tool.documents[i]);
      if (name.empty()) r.fail(item.node.mark, item.path, "`" + item.path + "` has no name before a colon", kDocumentHint);
      tool.entries.push_back({name, tool.documents[i]});
      marks.push_back(item.node.mark);
      paths.push_back(item.path);
    }
  }
  if (map.has("documents_file")) {
    const Field file = map.get("documents_file");
    tool.documents_file = resolve_path(r, file);
    require_regular_file(r, file, tool.documents_file, "the documents file");
    for (LookupDocument& d : read_documents_file(r, file, tool.documents_file)) {
      tool.entries.push_back(std::move(d));
      marks.push_back(file.node.mark);
      paths.push_back(file.path);
    }
  }
  if (tool.entries.empty()) {
    r.fail(map.field().node.mark, map.field().path, "the lookup tool `" + tool.name + "` has no documents",
           "give it `documents: [...]` or `documents_file: kb.jsonl`");
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < tool.entries.size(); ++i) {
    auto [it, inserted] = seen.emplace(tool.entries[i].name, i);
    if (!inserted) {
      r.fail(marks[i], paths[i], "two documents of `" + tool.name + "` are named `" + tool.entries[i].name + "`",
             "Lookup[name] must find one document; merge them");
    }
  }
}

ToolSection read_tool(const ConfigReader& r, const YamlEntry& entry, const std::string& path) {
  ToolSection tool;
  tool.name = entry.key;
  const Field field{entry.value, path};
  const MapReader any(r, field, kAnyToolKeys);
  tool.type = read_choice(r, any.get("type", "type: lookup or type: calculator"), tool_type_names());
  const MapReader map(r, field, tool.type == "lookup" ? kLookupKeys : kCalculatorKeys);
  if (map.has("description")) tool.description = read_text(r, map.get("description"));
  if (tool.type == "lookup") {
    read_lookup(r, map, tool);
  } else if (map.has("timeout_ms")) {
    tool.timeout_ms = read_int(r, map.get("timeout_ms"), 1, 3600 * 1000, "milliseconds one calculation may take");
  }
  return tool;
}

}  // namespace

void read_tools_section(const ConfigReader& r, const MapReader& top, SessionConfig& config) {
  const YamlNode* node = top.find("tools");
  if (node == nullptr) return;
  if (node->kind != YamlNode::Kind::kMap) {
    r.fail(node->mark, "tools", "`tools` must be a map of name: tool, found " + std::string(node->kind_name()),
           "tools: {calculate: {type: calculator}}");
  }
  require_at_most(r, Field{*node, "tools"}, node->entries.size(), kMaxEntries, "tools");
  for (const YamlEntry& entry : node->entries) {
    const std::string path = child_path("tools", entry.key);
    r.marks().set(path, entry.key_mark);
    check_tool_name(r, entry, path);
    config.tools.push_back(read_tool(r, entry, path));
  }
}

}  // namespace lorakv::agents::config
