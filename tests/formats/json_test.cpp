// tests/formats/json_test.cpp: the strict JSON parser: every value type, escapes and
// surrogate pairs, exact integers, malformed documents with line:column, and typed
// accessor errors that name the key path.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <limits>
#include <string>

#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"
#include "tests/support/fuzz_corpus.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_settings.h"

namespace lorakv::formats {
namespace {

// Expects parsing `text` to throw ConfigError whose message contains each needle.
void expect_parse_error(const std::string& text, const std::vector<std::string>& needles,
                        const JsonParseOptions& options = {}) {
  try {
    parse_json(text, options);
    ADD_FAILURE() << "expected a ConfigError for: " << text.substr(0, 80);
  } catch (const ConfigError& e) {
    for (const std::string& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Expects `fn` to throw ConfigError whose message contains each needle.
template <typename Fn>
void expect_config_error(Fn fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    for (const std::string& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Json, ParsesEveryValueType) {
  const JsonValue v = parse_json(R"( {"n": null, "t": true, "f": false, "i": 42, "d": -1.5,
      "s": "hi", "a": [1, [2, {}], []], "o": {"x": {"y": "z"}}} )");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.size(), 8u);
  EXPECT_TRUE(v.at("n").is_null());
  EXPECT_TRUE(v.at("t").as_bool());
  EXPECT_FALSE(v.at("f").as_bool());
  EXPECT_EQ(v.at("i").as_int(), 42);
  EXPECT_EQ(v.at("d").as_double(), -1.5);
  EXPECT_EQ(v.at("s").as_string(), "hi");
  const JsonValue& a = v.at("a");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a.at(size_t{1}).at(size_t{0}).as_int(), 2);
  EXPECT_TRUE(a.at(size_t{1}).at(size_t{1}).is_object());
  EXPECT_EQ(a.at(size_t{2}).size(), 0u);
  EXPECT_EQ(v.at("o").at("x").at("y").as_string(), "z");
  EXPECT_EQ(v.at("o").at("x").at("y").path(), "o.x.y");
  EXPECT_EQ(a.at(size_t{1}).at(size_t{1}).path(), "a[1][1]");
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_FALSE(v.find_int("n").has_value());  // null counts as absent
  EXPECT_EQ(v.find_string("s"), "hi");
  for (const char* scalar : {"null", "true", "0", "\"x\"", "[]", "{}"}) EXPECT_NO_THROW(parse_json(scalar)) << scalar;
}

TEST(Json, KeepsKeyOrderAndPrintsBack) {
  const JsonValue v = parse_json(R"({"zeta": 1, "alpha": [true, null], "mid": {"k": "v\n"}, "f": 2.0})");
  std::vector<std::string> keys;
  for (const auto& [k, val] : v.as_object()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"zeta", "alpha", "mid", "f"}));
  const std::string compact = v.to_string();
  EXPECT_EQ(compact, R"({"zeta": 1, "alpha": [true, null], "mid": {"k": "v\n"}, "f": 2.0})");
  EXPECT_EQ(parse_json(v.to_string(2)).to_string(), compact);  // pretty form re-parses
  EXPECT_NE(v.to_string(2).find("\n  \"alpha\": [\n    true,"), std::string::npos) << v.to_string(2);
}

TEST(Json, DecodesEscapesAndSurrogatePairs) {
  const JsonValue v = parse_json(R"(["\"\\\/\b\f\n\r\t", "\u0041\u00e9\u20AC", "\ud83d\ude00", "caf\u00E9 é 😀", "\u0000"])");
  EXPECT_EQ(v.at(size_t{0}).as_string(), "\"\\/\b\f\n\r\t");
  EXPECT_EQ(v.at(size_t{1}).as_string(), "A\xC3\xA9\xE2\x82\xAC");
  EXPECT_EQ(v.at(size_t{2}).as_string(), "\xF0\x9F\x98\x80");  // U+1F600
  EXPECT_EQ(v.at(size_t{3}).as_string(), "caf\xC3\xA9 \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(v.at(size_t{4}).as_string(), std::string(1, '\0'));
  EXPECT_EQ(v.at(size_t{4}).to_string(), "\"\\u0000\"");
  EXPECT_EQ(parse_json("\xEF\xBB\xBF{}").size(), 0u);  // a BOM is skipped
}

TEST(Json, NumbersKeepExactIntegers) {
  const JsonValue v = parse_json(
      "[9007199254740993, -9223372036854775808, 9223372036854775807, 18446744073709551616,"
      " 1e3, 2.5E-3, -0, -0.0, 0.1, 1e-400, 2.0, 123456789012]");
  EXPECT_EQ(v.at(size_t{0}).as_int(), 9007199254740993);  // 2^53 + 1: a double would round it
  EXPECT_EQ(v.at(size_t{1}).as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(v.at(size_t{2}).as_int(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(v.at(size_t{3}).as_double(), 18446744073709551616.0);
  expect_config_error([&] { v.at(size_t{3}).as_int(); }, {"[3]", "an integer within int64"});
  EXPECT_EQ(v.at(size_t{4}).as_double(), 1000.0);
  EXPECT_EQ(v.at(size_t{4}).as_int(), 1000);  // whole-valued floats are accepted
  EXPECT_DOUBLE_EQ(v.at(size_t{5}).as_double(), 0.0025);
  EXPECT_TRUE(std::signbit(v.at(size_t{6}).as_double()));
  EXPECT_EQ(v.at(size_t{6}).as_int(), 0);
  EXPECT_TRUE(std::signbit(v.at(size_t{7}).as_double()));
  EXPECT_EQ(v.at(size_t{8}).as_double(), 0.1);
  EXPECT_EQ(v.at(size_t{9}).as_double(), 0.0);  // underflow rounds to zero
  EXPECT_FALSE(v.at(size_t{10}).as_number().integer.has_value());
  EXPECT_EQ(v.at(size_t{11}).as_int(), 123456789012);
  expect_config_error([] { parse_json("0.5").as_int(); }, {"expected an integer", "found number 0.5"});
}

TEST(Json, MalformedInputsReportLineAndColumn) {
  expect_parse_error("{\"a\": 1,\n \"b\": 2,\n}", {"trailing comma in object", "line 3, column 1"});
  expect_parse_error("[1, 2,]", {"trailing comma in array", "line 1, column 7"});
  expect_parse_error("{\"a\": \"abc", {"unterminated string", "line 1, column 11", "end of input"});
  expect_parse_error("[\"a\\qb\"]", {"invalid escape '\\q'", "line 1, column 4"});
  expect_parse_error("[\"a\tb\"]", {"control character in string", "column 4", "byte 0x09"});
  expect_parse_error("[01]", {"leading zeros", "column 3"});
  expect_parse_error("{\"a\": 1} x", {"unexpected text after the JSON value", "column 10", "'x'"});
  expect_parse_error("{\"a\" 1}", {"expected ':'", "column 6"});
  expect_parse_error("{'a': 1}", {"expected a member name", "column 2"});
  expect_parse_error("[1 2]", {"expected ',' or ']'", "column 4"});
  expect_parse_error("[tru]", {"invalid value", "column 2"});
  expect_parse_error("[1.]", {"no digit after '.'", "column 4"});
  expect_parse_error("[1e+]", {"no digit in the exponent"});
  expect_parse_error("[-]", {"invalid number"});
  expect_parse_error("[1e999]", {"number out of range", "column 2"});
  expect_parse_error("", {"unexpected end of input", "line 1, column 1"});
  expect_parse_error("[\"\\ud83d\"]", {"lone high surrogate"});
  expect_parse_error("[\"\\ude00\"]", {"lone low surrogate"});
  expect_parse_error("[\"\\ud83dx\"]", {"lone high surrogate"});
  expect_parse_error("[\"\\u12G4\"]", {"invalid \\u escape"});
  expect_parse_error("[\"\xC0\xAF\"]", {"invalid UTF-8"});         // overlong '/'
  expect_parse_error("[\"\xED\xA0\x80\"]", {"invalid UTF-8"});     // an encoded surrogate
  expect_parse_error("{\"k\": 1, \"k\": 2}", {"duplicate key 'k'", "column 10"});
  // Columns count characters: the 'x' is the 6th character (the 7th byte).
  expect_parse_error("[\"é\" x]", {"column 6"});
}

TEST(Json, RejectsNestingBombsAndOversizedDocuments) {
  const std::string bomb = std::string(100000, '[') + std::string(100000, ']');
  expect_parse_error(bomb, {"nesting too deep", "at most 256", "column 257"});
  EXPECT_NO_THROW(parse_json(std::string(256, '[') + std::string(256, ']')));
  JsonParseOptions small;
  small.max_bytes = 10;
  expect_parse_error("[1, 2, 3, 4, 5]", {"too large", "at most 10 bytes"}, small);
  JsonParseOptions lenient;
  lenient.allow_duplicate_keys = true;
  EXPECT_EQ(parse_json(R"({"k": 1, "k": 2})", lenient).at("k").as_int(), 2);
}

// The error excerpt stops at character boundaries; a text of nothing but stray UTF-8
// continuation bytes once walked the excerpt's end below its start and read on past the
// document until it met a newline.
TEST(Json, ErrorExcerptStaysInsideTextOfStrayContinuationBytes) {
  const std::string text(100, '\x9c');
  try {
    parse_json(text);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("invalid value at line 1, column 1 (near '')"), std::string::npos) << what.substr(0, 200);
    EXPECT_NE(what.find("byte 0x9C"), std::string::npos) << what.substr(0, 200);
  }
}

// Bytes malloc has handed out and not taken back (arenas and mmapped blocks).
size_t heap_bytes_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Every value's key path is kept as a link to its container's, not as its own string: a
// long key above many values once put a copy of that key into every value's path, so a
// 70 KB document held 128 MB (and a few MB of text could ask for terabytes).
TEST(Json, MemoryStaysProportionalToTheTextUnderALongKey) {
  const std::string key(64 * 1024, 'k');
  std::string text = "{\"" + key + "\": [0";
  for (int k = 1; k < 2000; ++k) text += ",0";
  text += "]}";
  const size_t before = heap_bytes_in_use();
  const JsonValue v = parse_json(text);
  const size_t held = heap_bytes_in_use() - before;
  // ~200 bytes per value (the value and its path link) and three copies of the key.
  EXPECT_LT(held, 32 * text.size()) << "held " << held << " bytes for a " << text.size() << "-byte document";
  const JsonValue& last = v.at(key).at(size_t{1999});
  EXPECT_EQ(last.path(), key + "[1999]");
  expect_config_error([&] { last.as_string(); }, {"[" + key + "[1999]]", "expected a string"});
}

TEST(Json, PathsOfEveryShape) {
  const JsonValue v = parse_json(R"([{"": {"a": [[{"b": 1}]]}}, 2])");
  const JsonValue& b = v.at(size_t{0}).at("").at("a").at(size_t{0}).at(size_t{0}).at("b");
  EXPECT_EQ(b.path(), "[0]..a[0][0].b");
  EXPECT_EQ(v.at(size_t{1}).path(), "[1]");
  EXPECT_EQ(v.path(), "");
  EXPECT_EQ(v.display_path(), "(root)");
  const JsonValue o = parse_json(R"({"": {"x": 1}})");
  EXPECT_EQ(o.at("").at("x").path(), "x");  // an empty key adds nothing before a member
  expect_parse_error(R"({"a": [1, {"b": tru}]})", {"invalid value"});
  try {
    parse_json(R"({"a": [1, {"b": tru}]})");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().key, "a[1].b");
  }
}

using lorakv::testing::fuzz_corpus;

TEST(Json, ReplaysTheFuzzCorpusWithTypedErrorsOnly) {
  const auto files = fuzz_corpus("json");
  ASSERT_GE(files.size(), 4u) << "fuzz/corpus/json inputs missing";
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::ifstream in(f, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    try {
      const JsonValue v = parse_json(text.str());
      EXPECT_EQ(parse_json(v.to_string()).to_string(), v.to_string());  // prints back to itself
    } catch (const ConfigError&) {
      // a typed refusal is an accepted outcome
    }
  }
}

TEST(Json, TypedAccessorErrorsNameThePath) {
  const JsonValue cfg = parse_json(R"({"rope_scaling": {"factor": "eight", "type": null},
                                       "layers": [{"dim": 1.5}], "name": "x"})");
  expect_config_error([&] { cfg.at("rope_scaling").at("factor").as_double(); },
                      {"[rope_scaling.factor]", "expected a number", "found string \"eight\""});
  expect_config_error([&] { cfg.at("layers").at(size_t{0}).at("dim").as_int(); },
                      {"[layers[0].dim]", "expected an integer", "number 1.5"});
  expect_config_error([&] { cfg.at("rope_scaling").at("original_max"); },
                      {"required key is missing", "[rope_scaling.original_max]"});
  expect_config_error([&] { cfg.at("layers").at(size_t{3}); }, {"index out of range", "[layers[3]]"});
  expect_config_error([&] { cfg.at("name").find("x"); }, {"[name]", "expected an object"});
  expect_config_error([&] { cfg.as_array(); }, {"[(root)]", "found object{3}"});
  expect_config_error([&] { cfg.find_bool("name"); }, {"[name]", "expected a bool"});
}

TEST(Json, ParseFileNamesTheFile) {
  const std::string path = lorakv::testing::temp_path("bad_config.json");
  std::ofstream(path) << "{\n  \"hidden_size\": 576,\n  \"vocab\": [1, 2,,]\n}\n";
  try {
    parse_json_file(path);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.context().file, path);
    EXPECT_NE(std::string(e.what()).find("line 3, column 18"), std::string::npos) << e.what();
    EXPECT_EQ(e.context().key, "vocab[2]");
  }
  std::ofstream(path) << R"({"hidden_size": 576})";
  const JsonValue good = parse_json_file(path);
  EXPECT_EQ(good.at("hidden_size").source(), path);
  expect_config_error([&] { good.at("hidden_size").as_string(); }, {path, "[hidden_size]"});
  expect_config_error([] { parse_json_file("/nonexistent/config.json"); }, {"cannot open", "/nonexistent/config.json"});
}

}  // namespace
}  // namespace lorakv::formats
