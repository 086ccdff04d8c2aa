// agents/config/yaml_tree.cpp: yaml-cpp's parser events turned into a YamlNode tree, with
// the limits checked at each event (so hostile nesting stops before yaml-cpp recurses).
#include "lorakv/agents/config/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <sstream>
#include <unordered_map>
#include <utility>

namespace lorakv::agents::config {

const char* YamlNode::kind_name() const {
  switch (kind) {
    case Kind::kNull: return "nothing (null)";
    case Kind::kScalar: return "text";
    case Kind::kSequence: return "a list";
    case Kind::kMap: return "a map";
  }
  return "?";
}

namespace {

const char* const kNoAliasesHint =
    "write the value out in full: anchors and aliases are refused, so a small file cannot expand into a huge one";

class TreeBuilder : public YAML::EventHandler {
 public:
  TreeBuilder(const SourceText& source, const YamlLimits& limits) : source_(source), limits_(limits) {}

  YamlNode take_root() { return std::move(root_); }
  bool has_root() const { return has_root_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) fail(mark, "the file holds a second YAML document", "keep one document: remove the `---` line");
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    check_anchor(mark, anchor);
    place(make_node(YamlNode::Kind::kNull, mark));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    fail(mark, "aliases (*name) are not supported", kNoAliasesHint);
  }
  void OnAnchor(const YAML::Mark& mark, const std::string& name) override {
    fail(mark, "anchors (&" + name + ") are not supported", kNoAliasesHint);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    check_anchor(mark, anchor);
    check_tag(mark, tag);
    if (value.size() > limits_.max_scalar_bytes) {
      fail(mark, "a value of " + std::to_string(value.size()) + " bytes, over the limit of " +
                     std::to_string(limits_.max_scalar_bytes),
           "put long texts in a documents_file");
    }
    if (!is_valid_utf8(value)) {  // the file is UTF-8, but an escape like "\uD800" need not be
      fail(mark, "a value holds an escape that is no UTF-8 character", "write the character itself");
    }
    YamlNode node = make_node(YamlNode::Kind::kScalar, mark);
    node.scalar = value;
    node.plain = tag == "?";
    place(std::move(node));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(YamlNode::Kind::kSequence, mark, tag, anchor);
  }
  void OnSequenceEnd() override { stack_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(YamlNode::Kind::kMap, mark, tag, anchor);
  }
  void OnMapEnd() override { stack_.pop_back(); }

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& message, const std::string& hint = "") const {
    source_.fail(to_mark(mark), message, hint);
  }

  SourceMark to_mark(const YAML::Mark& mark) const {
    return mark.is_null() ? SourceMark{} : source_.mark(mark.line, mark.column);
  }

 private:
  struct Frame {
    YamlNode* node;
    std::string path;
    bool expecting_key = true;  // maps: the next event is a key
    std::string key;
    SourceMark key_mark;
    std::unordered_map<std::string, SourceMark> keys;  // maps: the keys so far
  };

  YamlNode make_node(YamlNode::Kind kind, const YAML::Mark& mark) {
    if (++nodes_ > limits_.max_nodes) {
      fail(mark, "more than " + std::to_string(limits_.max_nodes) + " values in the file",
           "a session config holds a few hundred values; put long lists in a documents_file");
    }
    YamlNode node;
    node.kind = kind;
    node.mark = to_mark(mark);
    return node;
  }

  void check_anchor(const YAML::Mark& mark, YAML::anchor_t anchor) const {
    if (anchor != YAML::NullAnchor) fail(mark, "anchors (&name) are not supported", kNoAliasesHint);
  }

  void check_tag(const YAML::Mark& mark, const std::string& tag) const {
    if (!tag.empty() && tag != "?" && tag != "!") {
      fail(mark, "the tag `" + tag + "` is not supported", "remove the tag: each key's type is fixed by the schema");
    }
  }

  void open(YamlNode::Kind kind, const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    check_anchor(mark, anchor);
    check_tag(mark, tag);
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      fail(mark, "lists and maps nested more than " + std::to_string(limits_.max_depth) + " deep",
           "a session config nests 5 levels at most");
    }
    std::string path = child_path();
    YamlNode* node = place(make_node(kind, mark));
    stack_.push_back(Frame{node, std::move(path)});
  }

  // The key path of the value about to be placed.
  std::string child_path() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    if (f.node->kind == YamlNode::Kind::kSequence) return f.path + "[" + std::to_string(f.node->items.size()) + "]";
    if (f.expecting_key) return f.path;  // a key: refused below unless it is plain text
    return f.path.empty() ? f.key : f.path + "." + f.key;
  }

  // Puts a finished (or just opened) node where the document is; returns where it lives.
  YamlNode* place(YamlNode node) {
    if (stack_.empty()) {
      root_ = std::move(node);
      has_root_ = true;
      return &root_;
    }
    Frame& f = stack_.back();
    if (f.node->kind == YamlNode::Kind::kSequence) {
      f.node->items.push_back(std::move(node));
      return &f.node->items.back();
    }
    if (f.expecting_key) {
      take_key(f, std::move(node));
      return nullptr;
    }
    f.node->entries.push_back(YamlEntry{std::move(f.key), f.key_mark, std::move(node)});
    f.expecting_key = true;
    return &f.node->entries.back().value;
  }

  void take_key(Frame& f, YamlNode node) {
    const std::string where = f.path.empty() ? "at the top level" : "in `" + f.path + "`";
    if (node.kind != YamlNode::Kind::kScalar) {
      source_.fail(node.mark, std::string("a key ") + where + " must be plain text, found " + node.kind_name(),
                   "write `name: value`, and close every [ and { (yaml-cpp reads an unclosed one as a key)");
    }
    auto [it, inserted] = f.keys.emplace(node.scalar, node.mark);
    if (!inserted) {
      source_.fail(node.mark, "duplicate key `" + node.scalar + "` " + where,
                   "a key appears once per map; the first is at line " + std::to_string(it->second.line));
    }
    f.key = std::move(node.scalar);
    f.key_mark = node.mark;
    f.expecting_key = false;
  }

  const SourceText& source_;
  const YamlLimits& limits_;
  std::vector<Frame> stack_;
  YamlNode root_;
  bool has_root_ = false;
  int documents_ = 0;
  size_t nodes_ = 0;
};

}  // namespace

YamlNode parse_yaml(const SourceText& source, const YamlLimits& limits) {
  std::istringstream in(source.text());
  TreeBuilder builder(source, limits);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
    }
  } catch (const YAML::Exception& e) {
    builder.fail(e.mark, "invalid YAML: " + e.msg, "check the indentation, quotes and brackets here");
  }
  if (!builder.has_root()) source.fail({}, "the file holds no YAML value (only comments?)", "a session config is a YAML map");
  return builder.take_root();
}

}  // namespace lorakv::agents::config
