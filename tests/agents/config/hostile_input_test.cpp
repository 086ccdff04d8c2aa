// tests/agents/config/hostile_input_test.cpp: files built to crash, hang or exhaust a
// loader (an alias bomb, nesting 100000 deep, a 10 MB value, bad bytes, a directory, a
// device) each end in a ConfigFileError, each well under a second.
#include <chrono>
#include <filesystem>

#include "lorakv/agents/config/source_text.h"
#include "tests/agents/config/config_test_util.h"

namespace lorakv::agents::config {
namespace {

// Runs `fn`, expecting a ConfigFileError with every needle, within half a second.
class HostileInputTest : public ConfigTest {
 protected:
  template <typename Fn>
  void expect_quick_failure(Fn&& fn, const std::vector<std::string>& needles) {
    const auto start = std::chrono::steady_clock::now();
    expect_error_from(fn, needles);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 0.5) << "a hostile file took " << seconds << " s";
  }
  void expect_quick_error(const std::string& yaml, const std::vector<std::string>& needles) {
    expect_quick_failure([&] { load(yaml); }, needles);
  }
};

TEST_F(HostileInputTest, BillionLaughsIsRefusedAtTheFirstAnchor) {
  std::string yaml = "a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    const std::string prev(1, static_cast<char>(c - 1));
    yaml += std::string(1, c) + ": &" + c + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
            ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n";
  }
  expect_quick_error(yaml, {"session.yaml:1:4", "anchors (&a) are not supported", "write the value out in full"});
}

TEST_F(HostileInputTest, AnchorsAndAliasesAnywhereAreRefused) {
  expect_quick_error("model: &m model.gguf\n", {"session.yaml:1:8", "anchors (&m) are not supported"});
  expect_quick_error("model: model.gguf\nagents:\n  planner: *p\n", {"session.yaml:3:12"});
  expect_quick_error("base: &b {temperature: 1}\n", {"session.yaml:1:7", "anchors (&b)"});
}

TEST_F(HostileInputTest, DeepNestingStopsAtTheDepthLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_quick_error(deep, {"session.yaml:1:33", "nested more than 32 deep"});
  expect_quick_error("model: " + deep, {"session.yaml:1:39", "nested more than 32 deep"});
  std::string maps;
  for (int i = 0; i < 20000; ++i) maps += "{a: ";
  expect_quick_error(maps + "1" + std::string(20000, '}'), {"session.yaml:1:129", "nested more than 32 deep"});
  // yaml-cpp reads an unclosed [ as the start of a key: refused as a key before any depth.
  expect_quick_error(std::string(100000, '['), {"session.yaml:1:", "close every [ and {"});
  expect_quick_error(std::string(100000, '{'), {"session.yaml:1:", "close every [ and {"});
  std::string dashes;
  for (int i = 0; i < 5000; ++i) dashes += "- ";
  expect_quick_error(dashes + "x\n", {"nested more than 32 deep"});
  std::string indented;
  for (int i = 0; i < 200; ++i) indented += std::string(static_cast<size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
  expect_quick_error(indented, {"nested more than 32 deep"});
}

TEST_F(HostileInputTest, HugeFilesAndValuesAreRefused) {
  const std::string ten_mb = "model: \"" + std::string(size_t{10} << 20, 'x') + "\"\n";
  const std::string path = write("huge.yaml", ten_mb);
  expect_quick_failure([&] { load_session_config(path); },
                     {path, "the file is 10485770 bytes, over the limit of 1 MiB"});
  expect_quick_error(ten_mb, {"session.yaml", "the text is 10485770 bytes, over the limit of 1 MiB"});
  const std::string big_value = "model: model.gguf\nagents:\n  planner:\n    instruction: \"" +
                                std::string(size_t{200} << 10, 'x') + "\"\n";
  expect_quick_error(big_value, {"session.yaml:4:18", "a value of 204800 bytes, over the limit of 131072"});
  std::string many = "[";
  for (int i = 0; i < 100001; ++i) many += "1,";
  expect_quick_error(many + "1]", {"more than 100000 values in the file"});
}

TEST_F(HostileInputTest, BadBytesAreRefusedAtTheirLineAndColumn) {
  // Columns count characters: the two-byte é is one column.
  expect_quick_error("model: model.gguf\nagents:\n  planner: {instruction: \"caf\xC3\xA9\xFF\"}\n",
                     {"session.yaml:3:31", "the file is not valid UTF-8 here", "save the file as UTF-8"});
  expect_quick_error("model: model.gguf\n  \xC0\xAF\n", {"session.yaml:2:3", "not valid UTF-8"});  // overlong '/'
  expect_quick_error("model: model.gguf\nx: \xED\xA0\x80\n", {"session.yaml:2:4", "not valid UTF-8"});  // a surrogate
  expect_quick_error(std::string("model: mo\0del\n", 14), {"session.yaml:1:10", "the control character 0x00"});
  expect_quick_error("model: model.gguf\ragents:\n", {"session.yaml:1:18", "a carriage return without a line feed"});
  expect_quick_error("\xFF\xFE" "m\0o\0", {"session.yaml:1:1", "not valid UTF-8"});  // UTF-16
}

TEST_F(HostileInputTest, EscapesAndCountsStayWithinBounds) {
  expect_quick_error("model: model.gguf\nagents: {planner: {instruction: \"\\uD800\"}}\n",
                     {"session.yaml:2:", "invalid YAML: invalid unicode: 55296"});
  expect_quick_error("model: \"model.gguf\\0.txt\"\n", {"session.yaml:1:8", "`model` holds a control character"});
  std::string agents = "model: model.gguf\nagents:\n";
  for (int i = 0; i < 1001; ++i) agents += "  a" + std::to_string(i) + ":\n";
  expect_quick_error(agents, {"session.yaml:3:3", "`agents` holds 1001 agents, more than 1000"});
  // No suggestion is computed for a long unknown word (the distance is quadratic in it).
  expect_quick_error("model: model.gguf\n? " + std::string(100000, 'x') + "\n: 1\n",
                     {"session.yaml:2:3", "unknown key `xxxx", "xxx...` at the top level [xxx"});
}

TEST_F(HostileInputTest, FilesThatAreNoConfigAreRefused) {
  expect_quick_failure([&] { load_session_config(dir()); }, {dir(), "this is a directory, not a YAML file"});
  expect_quick_failure([&] { load_session_config(dir() + "/none.yaml"); },
                     {dir() + "/none.yaml", "cannot open the config file: No such file or directory"});
  if (std::filesystem::exists("/dev/zero")) {
    expect_quick_failure([&] { load_session_config("/dev/zero"); }, {"/dev/zero", "this is not a regular file"});
  }
  const std::string empty = write("empty.yaml", "");
  expect_quick_failure([&] { load_session_config(empty); }, {empty, "the file is empty"});
  expect_quick_error(" \n\n\t\n", {"the file is empty"});
  expect_quick_error("# only a comment\n", {"the file holds no YAML value"});
  expect_quick_error("- model\n- agents\n", {"session.yaml:1:1", "the file must be a YAML map", "found a list"});
  expect_quick_error("just text\n", {"session.yaml:1:1", "the file must be a YAML map", "found text"});
  expect_quick_error("model: model.gguf\n---\nmodel: model.gguf\n", {"session.yaml:2:1", "a second YAML document"});
  expect_quick_error("model: !!binary aGVsbG8=\n", {"session.yaml:1:8", "the tag `tag:yaml.org,2002:binary` is not supported"});
  expect_quick_error("? [a, b]\n: c\n", {"session.yaml:1:3", "a key at the top level must be plain text, found a list"});
  expect_quick_error("model: [unclosed\nagents: x\n", {"session.yaml:", "invalid YAML"});
}

TEST_F(HostileInputTest, YamlSyntaxErrorsPointAtTheirCharacter) {
  // yaml-cpp's marks are 0-based and count bytes; ours are 1-based and count characters.
  expect_quick_error("model: model.gguf\nagents: {é: x, ]\n", {"session.yaml:2:16", "invalid YAML: illegal flow end"});
  expect_quick_error("model: model.gguf\nagents:\n  planner: {\"é\": 1}}\n", {"session.yaml:3:", "invalid YAML"});
  expect_quick_error("model: 'a' b\n", {"session.yaml:1:", "invalid YAML"});
  expect_quick_error("a:\n\tb: 1\n", {"session.yaml:2:", "invalid YAML"});
}

}  // namespace
}  // namespace lorakv::agents::config
