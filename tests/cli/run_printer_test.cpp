// tests/cli/run_printer_test.cpp: what `lorakv run` prints for a workflow's events, without a
// model: turns prefixed with their agent, tool calls, a progress line that the next print
// replaces by the turn's prefix again (it shows only while a turn waits for its first text),
// and --json's one object per event.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "lorakv/cli/run_printer.h"
#include "lorakv/formats/json.h"

namespace lorakv::cli {
namespace {

agents::Reply reply(const std::string& agent, const std::string& text, int tokens) {
  agents::Reply r;
  r.agent = agent;
  r.text = text;
  r.tokens.assign(static_cast<size_t>(tokens), 5);
  r.appended = true;
  r.time_to_first_token_s = 0.25;
  r.decode_seconds = 0.5;
  return r;
}

TEST(RunPrinter, TextModeStreamsTurnsAndClearsTheProgressLine) {
  std::ostringstream out;
  RunPrinter printer(out, /*json=*/false);
  const agents::WorkflowObserver o = printer.observer();
  std::string agent;
  o.on_append("user", "How old was Dok Gramein in 1940?");
  EXPECT_FALSE(printer.waiting_for_first_text(&agent));
  o.on_turn_start("planner");
  ASSERT_TRUE(printer.waiting_for_first_text(&agent));
  EXPECT_EQ(agent, "planner");
  printer.progress("planner: processing the trajectory");
  o.on_text("planner", "Thought: look up Dok Gramein.");
  EXPECT_FALSE(printer.waiting_for_first_text(&agent));
  o.on_turn_end("planner", reply("planner", "Thought: look up Dok Gramein.", 9));
  o.on_tool_call("lookup", "Dok Gramein");
  EXPECT_EQ(out.str(),
            "[user] How old was Dok Gramein in 1940?\n[planner] "
            "\r\033[Kplanner: processing the trajectory"
            "\r\033[K[planner] Thought: look up Dok Gramein.\n"
            "  -> lookup(Dok Gramein)\n");
  EXPECT_EQ(printer.totals().at("planner").tokens, 9);
  EXPECT_EQ(printer.totals().at("planner").decode_tokens, 8);  // after the first token
}

TEST(RunPrinter, JsonModePrintsOneObjectPerEvent) {
  std::ostringstream out;
  RunPrinter printer(out, /*json=*/true);
  const agents::WorkflowObserver o = printer.observer();
  o.on_turn_start("actor");
  o.on_text("actor", "Lookup[\"X\"]");
  o.on_turn_end("actor", reply("actor", "Lookup[\"X\"]", 4));
  agents::ToolResult tool;
  tool.text = "No document found.";
  o.on_tool_result("lookup", tool);
  agents::WorkflowResult result;
  result.answer = "26";
  result.steps = 3;
  printer.answer(result);
  std::istringstream lines(out.str());
  std::vector<std::string> events;
  for (std::string line; std::getline(lines, line);) {
    const formats::JsonValue v = formats::parse_json(line);
    events.push_back(v.at("event").as_string());
    if (events.back() == "text") {
      EXPECT_EQ(v.at("text").as_string(), "Lookup[\"X\"]");
    }
    if (events.back() == "result") {
      EXPECT_EQ(v.at("answer").as_string(), "26");
      EXPECT_TRUE(v.at("stopped_by").is_null()) << line;  // not stopped early: null, not ""
    }
  }
  EXPECT_EQ(events, (std::vector<std::string>{"turn_start", "text", "turn_end", "tool_result", "result"}));
  // No answer, stopped early: answer null, stopped_by the agent and why.
  std::ostringstream second;
  RunPrinter stopped(second, /*json=*/true);
  agents::WorkflowResult none;
  none.stopped_by = "actor: length";
  stopped.answer(none);
  const formats::JsonValue v = formats::parse_json(second.str());
  EXPECT_TRUE(v.at("answer").is_null()) << second.str();
  EXPECT_EQ(v.at("stopped_by").as_string(), "actor: length");
}

// The summary says what it compares: the KV dtype, the eviction and its rows, and N full
// caches of the same dtype over the whole trajectory, in whole blocks.
TEST(RunPrinter, SummaryStatesKvDtypeEvictionAndWhatFullCachesAssume) {
  std::ostringstream out;
  RunPrinter printer(out, /*json=*/false);
  agents::SessionStats s;
  s.trajectory_tokens = 100;
  s.shared_kv_bytes = 1 << 20;
  agents::RuntimeStats rt;
  rt.kv_dtype = "int8";
  rt.driver.rows_evicted = 120;
  rt.base_row_bytes = 1 << 14;  // 16 KiB a row
  SummaryFacts f;
  f.mode = "full_shared";
  f.block_size = 16;
  f.agents = 3;
  f.eviction = "snapkv, budget 64 tokens";
  printer.summary(s, rt, f);
  const std::string text = out.str();
  EXPECT_NE(text.find("summary (full_shared, 100 trajectory tokens, KV int8, eviction snapkv, budget 64 tokens: "
                      "120 rows evicted)"),
            std::string::npos)
      << text;
  // 3 agents x 112 rows (100 in blocks of 16) x 16 KiB = 5.25 MiB, against 1 MiB held.
  EXPECT_NE(text.find("3 full int8 caches of the whole trajectory would hold 5.25 MiB (5.25x)"), std::string::npos)
      << text;
  std::ostringstream json_out;
  RunPrinter json(json_out, /*json=*/true);
  f.eviction.clear();
  json.summary(s, rt, f);
  const formats::JsonValue v = formats::parse_json(json_out.str());
  EXPECT_EQ(v.at("kv_dtype").as_string(), "int8");
  EXPECT_TRUE(v.at("eviction").is_null());
  EXPECT_EQ(v.at("kv_bytes").at("n_full_caches").as_int(), 3 * 112 * (1 << 14));
}

}  // namespace
}  // namespace lorakv::cli
