// agents/document_store.cpp: the Lookup tool's documents, from strings or a kb_*.jsonl file.
#include <fstream>
#include <iterator>
#include <sstream>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/python_text.h"
#include "lorakv/formats/json.h"

namespace lorakv::agents {
namespace {

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DocumentStoreError("cannot read the file", {path});
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Lines as Python's text mode reads them (universal newlines: "\n", "\r\n" and "\r").
std::vector<std::string> text_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n' && text[i] != '\r') {
      line.push_back(text[i]);
      continue;
    }
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

// A record's string member, or an error naming the file, the line and the member.
std::string string_member(const formats::JsonValue& record, const char* key, const std::string& path,
                          const std::string& where) {
  const formats::JsonValue* value = record.find(key);
  if (value == nullptr || !value->is_string()) {
    throw DocumentStoreError("a knowledge-base record needs a string member", {path, where + ": " + key, "a string",
                                                                                value ? value->describe() : "nothing"});
  }
  return value->as_string();
}

}  // namespace

void DocumentStore::add(const std::string& name, const std::string& document) { documents_[name] = document; }

const std::string* DocumentStore::find(const std::string& name) const {
  auto it = documents_.find(name);
  return it == documents_.end() ? nullptr : &it->second;
}

DocumentStore DocumentStore::from_documents(const std::vector<std::string>& documents) {
  DocumentStore store;
  for (size_t i = 0; i < documents.size(); ++i) {
    const size_t colon = documents[i].find(':');
    const std::string name = colon == std::string::npos ? "" : python::strip(documents[i].substr(0, colon));
    if (name.empty()) {
      throw DocumentStoreError("a document must start with its name and a ':'",
                               {"", "document " + std::to_string(i), "\"<name>: <text>\"", documents[i]});
    }
    store.add(name, documents[i]);
  }
  return store;
}

DocumentStore DocumentStore::from_jsonl(const std::string& path) {
  DocumentStore store;
  const std::vector<std::string> lines = text_lines(read_whole_file(path));
  for (size_t i = 0; i < lines.size(); ++i) {
    if (python::strip(lines[i]).empty()) continue;
    const std::string where = "line " + std::to_string(i + 1);
    formats::JsonParseOptions options;
    options.allow_duplicate_keys = true;  // as Python's json: the last one wins
    formats::JsonValue record;
    try {
      record = formats::parse_json(lines[i], options);
    } catch (const InternalError&) {  // a bug stays one
      throw;
    } catch (const Error& e) {
      throw DocumentStoreError("a line is not valid JSON: " + e.message(), {path, where});
    }
    if (!record.is_object()) {
      throw DocumentStoreError("a knowledge-base line must be a JSON object",
                               {path, where, "an object", record.describe()});
    }
    store.add(string_member(record, "name", path, where), string_member(record, "document", path, where));
  }
  return store;
}

}  // namespace lorakv::agents
