// tests/agents/tools_test.cpp: the built-in tools and action parsing write what the Python
// reference writes, and the registry's failure paths. The expected strings were printed by
// tools/agentic_qa's own functions (generate_data.calc, common.parse_action and
// run_episodes.py's verdict expression) for each input; a `raises` row is one where the
// Python raises ValueError (the runner would stop), and the message is Python's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "lorakv/agents/actions.h"
#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/tools.h"
#include "lorakv/agents/workflow_react.h"
#include "tests/support/test_settings.h"

namespace lorakv::agents {
namespace {

using namespace std::chrono_literals;

struct CalcCase {
  const char* expression;
  const char* python;  // calc's output, or the ValueError's message
  bool raises;
};

const CalcCase kCalcCases[] = {
    {"1940 - 1914", "26", false},
    {"1914 - 1940", "-26", false},
    {"3 + 4", "7", false},
    {"3 * 4", "12", false},
    {"0 * 77", "0", false},
    {"3 +- 4", "12", false},
    {"3 -* 4", "12", false},
    {"3 +-* 4", "12", false},
    {"3 *+ 4", "Error: cannot calculate.", false},
    {"3 ** 4", "Error: cannot calculate.", false},
    {"3 / 4", "Error: cannot calculate.", false},
    {"3 - 4 - 5", "Error: cannot calculate.", false},
    {"3-4", "Error: cannot calculate.", false},
    {"", "Error: cannot calculate.", false},
    {"   ", "Error: cannot calculate.", false},
    {"  7   -   2  ", "5", false},
    {"-5 - -6", "1", false},
    {"-5 * -6", "30", false},
    {"007 + 1", "8", false},
    {"-0 * 5", "0", false},
    {"-0 - 0", "0", false},
    {"1.5 + 2", "Error: cannot calculate.", false},
    {"a - b", "Error: cannot calculate.", false},
    {"+5 - 1", "Error: cannot calculate.", false},
    {"5 - ", "Error: cannot calculate.", false},
    {"5", "Error: cannot calculate.", false},
    {"99999999999999999999 * 99999999999999999999", "9999999999999999999800000000000000000001", false},
    {"-9223372036854775808 - 1", "-9223372036854775809", false},
    {"9223372036854775807 + 1", "9223372036854775808", false},
    {"-9223372036854775808 * -1", "9223372036854775808", false},
    {"3\011-\0124", "-1", false},
    {"3 \302\240- 4", "-1", false},
    {"3\343\200\200-\343\200\2004", "-1", false},
    {"3\342\200\213-\342\200\2134", "Error: cannot calculate.", false},
    {"\331\243 + 1", "4", false},
    {"\357\274\221\357\274\222 * 2", "24", false},
    {"1_000 + 1", "Error: cannot calculate.", false},
    {"- - 1", "Error: cannot calculate.", false},
    {"1940 \342\200\223 1914", "Error: cannot calculate.", false},
    {"1940 - 1914]", "Error: cannot calculate.", false},
    {"[1940 - 1914", "Error: cannot calculate.", false},
    {"1 + 2 + ", "Error: cannot calculate.", false},
    {"12 + \302\262", "invalid literal for int() with base 10: '\302\262'", true},
    {"--5 + 1", "invalid literal for int() with base 10: '--5'", true},
    {"5 + --1", "invalid literal for int() with base 10: '--1'", true},
    {"\302\262 + 1", "invalid literal for int() with base 10: '\302\262'", true},
    {"1\302\262 + 1", "invalid literal for int() with base 10: '1\302\262'", true},
    {"-\302\262 + 1", "invalid literal for int() with base 10: '-\302\262'", true},
    {"4085928517108185987576963212575368459320 + 78077402999564100389853538719399888",
     "4086006594511185551677353066114087859208", false},
    {"9756113292219228412817920738818447173649 - -71439195180845360900602709765828875",
     "9756184731414409258178821341528213002524", false},
    {"-8216694789989327129830182669350655006886 * -25816061071994577046139342478535985",
     "212122694508304124655149251616767298725379665603841792916370513127373792710", false},
    {"-8656664256543370914789444691223678766280 - -83521144594067669563863718015728433",
     "-8656580735398776847119880827505663037847", false},
    {"8564671062986572961186235646807418591948 * -52063046291290659567321570100134227",
     "-445902866021947528375107181906822568242821225729619926496034596930141404196", false},
};

TEST(Calculator, WritesWhatPythonsCalcWrites) {
  for (const CalcCase& c : kCalcCases) {
    if (!c.raises) {
      EXPECT_EQ(calculate(c.expression), c.python) << "calc(" << c.expression << ")";
      continue;
    }
    try {
      calculate(c.expression);
      ADD_FAILURE() << "calc(" << c.expression << ") raises in Python";
    } catch (const CalculationError& e) {
      EXPECT_EQ(e.message(), c.python) << "calc(" << c.expression << ")";
    }
  }
}

TEST(Calculator, KeepsPythonsDigitLimits) {
  const std::string digits_4300(4300, '1'), digits_4301(4301, '1');
  EXPECT_EQ(calculate(digits_4300 + " + 0"), digits_4300);
  EXPECT_EQ(calculate("-" + digits_4300 + " - 0"), "-" + digits_4300);
  try {
    calculate(digits_4301 + " + 0");
    ADD_FAILURE() << "int() of 4301 digits raises in Python";
  } catch (const CalculationError& e) {
    EXPECT_EQ(e.message(),
              "Exceeds the limit (4300 digits) for integer string conversion: value has 4301 digits; use "
              "sys.set_int_max_str_digits() to increase the limit");
  }
  // A result over 4300 digits: str() raises.
  EXPECT_THROW(calculate(std::string(4300, '9') + " + 1"), CalculationError);
  EXPECT_THROW(calculate(std::string(2200, '9') + " * " + std::string(2200, '9')), CalculationError);
  // int()'s message quotes at most 200 characters of the operand's repr.
  try {
    calculate("--" + std::string(300, '7') + " + 1");
    ADD_FAILURE();
  } catch (const CalculationError& e) {
    EXPECT_EQ(e.message(), "invalid literal for int() with base 10: '--" + std::string(197, '7'));
  }
}

struct ActionCase {
  const char* text;
  const char* action;  // "" when parse_action returns None
  const char* argument;
};

const ActionCase kActionCases[] = {
    {"Lookup[Dok Gramein]", "Lookup", "Dok Gramein"},
    {"  Lookup[Dok Gramein]\012", "Lookup", "Dok Gramein"},
    {"Lookup[]", "Lookup", ""},
    {"Lookup[", "", ""},
    {"Lookup]", "", ""},
    {"lookup[x]", "", ""},
    {"Lookup [x]", "", ""},
    {"Lookup[a]b]", "Lookup", "a]b"},
    {"Lookup[a] b", "", ""},
    {"Finish[26]", "Finish", "26"},
    {"Finish[ 26 ]", "Finish", " 26 "},
    {"Calculate[1940 - 1914]", "Calculate", "1940 - 1914"},
    {"Calculate[1\0122]", "Calculate", "1\0122"},
    {"Search[x]", "", ""},
    {"Finish[x]\012", "Finish", "x"},
    {"Finish[x]\012more", "", ""},
    {"Lookup[x]]", "Lookup", "x]"},
    {"", "", ""},
    {"Thought: Lookup[x]", "", ""},
    {"\302\240Finish[1]\343\200\200", "Finish", "1"},
    {"Finish[[1]]", "Finish", "[1]"},
    {"Finish", "", ""},
    {"Finish[]", "Finish", ""},
    {"LookupLookup[x]", "", ""},
};

TEST(ParseAction, ReadsWhatCommonParseActionReads) {
  for (const ActionCase& c : kActionCases) {
    const Action a = parse_action(c.text);
    const std::string expected = c.action;
    const Action::Kind kind = expected.empty()      ? Action::Kind::kInvalid
                              : expected == "Finish" ? Action::Kind::kFinish
                                                     : Action::Kind::kTool;
    EXPECT_EQ(a.kind, kind) << c.text;
    EXPECT_EQ(a.name, expected) << c.text;
    EXPECT_EQ(a.argument, c.argument) << c.text;
  }
  // Other action words, for a workflow with its own tools.
  EXPECT_EQ(parse_action("Search[x]", {"Search"}).kind, Action::Kind::kTool);
  EXPECT_EQ(parse_action("Lookup[x]", {"Search"}).kind, Action::Kind::kInvalid);
  EXPECT_EQ(parse_action("Done[x]", {}, "Done").kind, Action::Kind::kFinish);
}

TEST(ReactVerdict, ReadsWhatRunEpisodesReads) {
  const std::pair<const char*, const char*> cases[] = {
      {"Given: 26. Expected: 26.\012Verdict: right.", "right"},
      {"Given: 37. Expected: 26.\012Verdict: wrong", "wrong"},
      {"Verdict:  right...", "right"},
      {"Verdict: maybe.", "other:maybe"},
      {"Given: 37. Expected: 26.", "other:Given: 37. Expected:"},
      {"Verdict: right. Verdict: wrong.", "other:right. Verdict: wron"},
      {"", "other:"},
      {"\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251"
       "\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251",
       "other:\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251"
       "\303\251\303\251\303\251\303\251\303\251\303\251\303\251"},
      {"Verdict:\302\240wrong.\343\200\200", "wrong"},
  };
  for (const auto& c : cases) EXPECT_EQ(react_verdict(c.first), c.second) << c.first;
}

std::string kb_test_path() {
  return lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/agentic_qa/kb_test.jsonl";
}

TEST(DocumentStore, LooksUpAsRunEpisodesDoes) {
  const DocumentStore store = DocumentStore::from_jsonl(kb_test_path());
  EXPECT_EQ(store.size(), 96u);
  const std::string ba = "Ba Kesquem: born 1869, lives in Redrak, works as sailor.";
  EXPECT_EQ(lookup(store, "Ba Kesquem"), ba);
  EXPECT_EQ(lookup(store, "  Ba Kesquem\n"), ba);  // kb.get(act[1].strip(), ...)
  EXPECT_EQ(lookup(store, "ba kesquem"), kNoDocumentFound);
  EXPECT_EQ(lookup(store, "Ba  Kesquem"), kNoDocumentFound);
  EXPECT_EQ(lookup(store, ""), kNoDocumentFound);
  EXPECT_EQ(lookup(store, ba), kNoDocumentFound);
  EXPECT_EQ(lookup(store, "Redrak"), "Redrak: city founded 1526, mayor Ba Kesquem.");

  const DocumentStore from_text = DocumentStore::from_documents({ba, "Gramfal: city founded 1402, mayor Dok Gramein."});
  EXPECT_EQ(lookup(from_text, "Ba Kesquem"), ba);
  EXPECT_EQ(lookup(from_text, "Gramfal"), "Gramfal: city founded 1402, mayor Dok Gramein.");
  EXPECT_THROW(DocumentStore::from_documents({"no name here"}), DocumentStoreError);
  EXPECT_THROW(DocumentStore::from_documents({" : empty name"}), DocumentStoreError);
}

// Writes `text` to a temporary file; its path.
std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

void expect_store_error(const std::string& text, const std::string& line) {
  const std::string path = temp_file("kb_bad.jsonl", text);
  try {
    DocumentStore::from_jsonl(path);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const DocumentStoreError& e) {
    EXPECT_EQ(e.context().file, path) << e.what();
    EXPECT_EQ(e.context().key.rfind(line, 0), 0u) << e.what();
  }
}

TEST(DocumentStore, JsonlErrorsNameTheFileAndLine) {
  const std::string good = R"({"name": "A", "document": "A: one."})";
  expect_store_error(good + "\n{not json\n", "line 2");
  expect_store_error(good + "\n\n[1, 2]\n", "line 3");
  expect_store_error(R"({"document": "A: one."})", "line 1");
  expect_store_error(good + "\r\n" + R"({"name": 7, "document": "x"})", "line 2");
  expect_store_error(good + "\n" + R"({"name": "B"})" + "\n", "line 2");
  try {
    DocumentStore::from_jsonl(::testing::TempDir() + "no_such_kb.jsonl");
    ADD_FAILURE();
  } catch (const DocumentStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_kb.jsonl"), std::string::npos) << e.what();
  }
  // Blank lines are skipped and a repeated name keeps its later document, as Python's dict.
  const std::string path = temp_file("kb_ok.jsonl", good + "\n  \n" + R"({"name": "A", "document": "A: two."})" + "\n");
  EXPECT_EQ(lookup(DocumentStore::from_jsonl(path), "A"), "A: two.");
}

TEST(ToolRegistry, CallsToolsAndReportsFailuresAsText) {
  ToolRegistry tools;
  tools.add(calculator_tool());
  tools.add({"fails", "throws", [](const std::string&) -> std::string { throw std::runtime_error("no network"); }, {}});
  EXPECT_THROW(tools.add(calculator_tool()), ToolError);
  EXPECT_THROW(tools.add({"", "", calculate, {}}), ToolError);
  EXPECT_THROW(tools.add({"empty", "", nullptr, {}}), ToolError);
  EXPECT_EQ(tools.names(), (std::vector<std::string>{"calculator", "fails"}));

  ToolResult r = tools.call("calculator", "1940 - 1914");
  EXPECT_EQ(r.text, "26");
  EXPECT_EQ(r.status, ToolStatus::kOk);
  r = tools.call("calculator", "--5 + 1");  // Python raises here; the registry reports it
  EXPECT_EQ(r.status, ToolStatus::kError);
  EXPECT_EQ(r.text, "Error: calculation error: invalid literal for int() with base 10: '--5'");
  r = tools.call("fails", "x");
  EXPECT_EQ(r.status, ToolStatus::kError);
  EXPECT_EQ(r.text, "Error: no network");
  r = tools.call("search", "x");
  EXPECT_EQ(r.status, ToolStatus::kUnknownTool);
  EXPECT_EQ(r.text, "Error: unknown tool 'search'.");
  EXPECT_STREQ(tool_status_name(ToolStatus::kUnknownTool), "unknown_tool");
  const ToolRegistry copy = tools;  // registries copy (and move) as values
  EXPECT_EQ(copy.call("calculator", "2 * 21").text, "42");
}

TEST(ToolRegistry, StopsWaitingAtTheDeadline) {
  auto finished = std::make_shared<std::atomic<bool>>(false);
  ToolRegistry tools;
  tools.add({"slow", "sleeps past its deadline",
             [finished](const std::string&) {
               std::this_thread::sleep_for(400ms);
               *finished = true;
               return std::string("too late");
             },
             50ms});
  tools.add({"hangs", "never returns while the test runs",
             [](const std::string&) {
               std::this_thread::sleep_for(std::chrono::hours(1));  // abandoned: detached, result discarded
               return std::string();
             },
             20ms});
  tools.add({"quick", "answers in time", [](const std::string& a) { return "echo " + a; }, 2000ms});
  tools.add({"throws late", "throws within its deadline",
             [](const std::string&) -> std::string { throw std::invalid_argument("bad city"); }, 2000ms});

  ToolResult r = tools.call("slow", "x");
  EXPECT_EQ(r.status, ToolStatus::kTimeout);
  EXPECT_EQ(r.text, "Error: tool 'slow' timed out after 50 ms.");
  EXPECT_GE(r.seconds, 0.045);
  EXPECT_LT(r.seconds, 0.35);  // did not wait for the function
  EXPECT_FALSE(*finished);

  r = tools.call("hangs", "x");
  EXPECT_EQ(r.status, ToolStatus::kTimeout);
  EXPECT_LT(r.seconds, 1.0);

  r = tools.call("quick", "x");
  EXPECT_EQ(r.status, ToolStatus::kOk);
  EXPECT_EQ(r.text, "echo x");
  r = tools.call("throws late", "x");
  EXPECT_EQ(r.status, ToolStatus::kError);
  EXPECT_EQ(r.text, "Error: bad city");

  // The abandoned slow call runs on and finishes on its own thread; nobody reads its result.
  for (int i = 0; i < 100 && !*finished; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(*finished);
}

}  // namespace
}  // namespace lorakv::agents
