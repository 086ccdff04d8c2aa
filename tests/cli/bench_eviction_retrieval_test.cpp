// tests/cli/bench_eviction_retrieval_test.cpp: the pure parts of `lorakv bench eviction`'s
// retrieval task (cli/bench/bench_eviction_retrieval.h): facts are a function of seed and
// index, the fact lands at the asked depth of the haystack, the CSV's keys make a rerun skip
// finished rows of the same grid only; bad flags are refused before the model loads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lorakv/cli/bench/bench_eviction_retrieval.h"
#include "lorakv/cli/cli.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::cli {
namespace {

TEST(EvictionRetrieval, FactsAreAFunctionOfSeedAndIndex) {
  // Pinned: the same facts with every compiler and standard library.
  EXPECT_EQ(make_fact(1, 0).name, "Walt Ulrich");
  EXPECT_EQ(make_fact(1, 0).code, "1503");
  std::set<std::string> names, codes;
  for (int64_t i = 0; i < 100; ++i) {
    const RetrievalFact f = make_fact(7, i);
    EXPECT_EQ(f.name, make_fact(7, i).name);
    EXPECT_EQ(f.code, make_fact(7, i).code);
    EXPECT_EQ(f.code.size(), 4u) << f.code;
    EXPECT_GE(f.code[0], '1') << f.code;
    names.insert(f.name);
    codes.insert(f.code);
  }
  EXPECT_GE(names.size(), 60u);  // 24 x 18 names: few repeats among 100
  EXPECT_GE(codes.size(), 95u);
  EXPECT_NE(make_fact(1, 3).name + make_fact(1, 3).code, make_fact(2, 3).name + make_fact(2, 3).code);
}

TEST(EvictionRetrieval, QuestionNamesThePersonAndTheAnswerIsTheCode) {
  const RetrievalFact f{"Ada Lindqvist", "4821"};
  const RetrievalTexts t = retrieval_texts(f);
  EXPECT_EQ(t.fact, "The access code for Ada Lindqvist is 4821.\n");
  EXPECT_NE(t.question.find("What is the access code for Ada Lindqvist?"), std::string::npos) << t.question;
  EXPECT_EQ(t.question.find("4821"), std::string::npos) << t.question;
  EXPECT_EQ(t.answer, " 4821");
  // The answer continues the question as the fact's own sentence does.
  const std::string fact_before_code = t.fact.substr(0, t.fact.find(" 4821"));
  EXPECT_EQ(t.question.substr(t.question.size() - fact_before_code.size()), fact_before_code);
}

// A filler of n tokens whose lines start every `line` tokens: token i is i.
struct Filler {
  std::vector<int32_t> tokens;
  std::vector<bool> starts_line;
};
Filler filler(int64_t n, int64_t line) {
  Filler f;
  for (int64_t i = 0; i < n; ++i) {
    f.tokens.push_back(static_cast<int32_t>(i));
    f.starts_line.push_back(i % line == 0);
  }
  return f;
}

TEST(EvictionRetrieval, FactLandsAtALineStartNearTheDepth) {
  const Filler f = filler(2048, 10);
  const std::vector<int32_t> fact = {-1, -2, -3};
  for (double depth : {0.0, 0.1, 0.25, 0.5, 0.9, 1.0}) {
    const int64_t p = fact_position(f.starts_line, depth);
    EXPECT_LE(std::fabs(static_cast<double>(p) - depth * 2048), 5.0) << depth << " -> " << p;
    EXPECT_TRUE(p == 2048 || p % 10 == 0) << depth << " -> " << p;
    const std::vector<int32_t> haystack = insert_fact(f.tokens, fact, p);
    ASSERT_EQ(haystack.size(), 2048u + fact.size());
    EXPECT_EQ(std::vector<int32_t>(haystack.begin() + p, haystack.begin() + p + 3), fact) << depth;
    for (int64_t i = 0; i < static_cast<int64_t>(haystack.size()); ++i) {  // the filler, in order, around it
      if (i >= p && i < p + 3) continue;
      ASSERT_EQ(haystack[static_cast<size_t>(i)], i < p ? i : i - 3) << depth << " at " << i;
    }
  }
  EXPECT_EQ(fact_position(f.starts_line, 0.0), 0);
  EXPECT_EQ(fact_position(f.starts_line, 1.0), 2048);
  // Lines far apart: the nearest start wins, not the next one.
  EXPECT_EQ(fact_position(filler(1000, 300).starts_line, 0.4), 300);
}

TEST(EvictionRetrieval, GridSpreadsCasesOverDepthsInTurn) {
  RetrievalGrid g;
  g.depths = {0.1, 0.5, 0.9};
  g.cases = 7;
  EXPECT_EQ(g.depth_of(0), 0.1);
  EXPECT_EQ(g.depth_of(4), 0.5);
  EXPECT_EQ(g.depth_of(5), 0.9);
  EXPECT_EQ(g.windows(), 3);
  EXPECT_EQ(g.depths_text(), "0.1;0.5;0.9");
  EXPECT_GE(full_retrieval_grid().cases, 100);
  EXPECT_EQ(full_retrieval_grid().depths.size(), 5u);
  EXPECT_EQ(default_retrieval_grid().depths.size(), 3u);
}

TEST(EvictionRetrieval, RerunSkipsFinishedRowsOfTheSameGridOnly) {
  const std::string csv = lorakv::testing::temp_path("eviction_retrieval.csv");
  RetrievalGrid grid;
  RetrievalGrid other = grid;
  other.cases = grid.cases + 1;
  {
    std::ofstream out(csv);
    out << retrieval_csv_header() << "\n"
        << retrieval_row_key("none", "-", grid) << ",6,1,-0.31,98313600,98313600,0.1:1.00;0.5:1.00;0.9:1.00,221.7\n"
        << retrieval_row_key("h2o", "0.5", other) << ",5,0.83,-0.9,1,1,0.1:1.00;0.5:1.00;0.9:0.50,200\n"
        << retrieval_row_key("h2o", "0.25", grid) << ",5,0.8";  // cut short by a stopped run
  }
  const std::set<std::string> done = finished_retrieval_rows(csv);
  EXPECT_EQ(done, (std::set<std::string>{retrieval_row_key("none", "-", grid), retrieval_row_key("h2o", "0.5", other)}));
  EXPECT_EQ(done.count(retrieval_row_key("h2o", "0.5", grid)), 0u);    // another grid's row
  EXPECT_EQ(done.count(retrieval_row_key("h2o", "0.25", grid)), 0u);   // incomplete
  EXPECT_TRUE(finished_retrieval_rows(csv + ".absent").empty());
  std::remove(csv.c_str());
}

std::string refusal(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  try {
    run_cli(args, out, err);
  } catch (const ConfigError& e) {
    return e.what();
  } catch (const Error& e) {  // e.g. the absent model: the flag got through
    return std::string("not refused: ") + e.what();
  }
  return "accepted";
}

TEST(EvictionRetrieval, BadFlagsAreRefusedNamingThemBeforeTheModelLoads) {
  // --model names no file: every refusal below comes before anything is loaded.
  const std::vector<std::string> bench = {"bench", "eviction", "--model", "absent.gguf"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = bench;
    args.insert(args.end(), extra.begin(), extra.end());
    return refusal(args);
  };
  const std::string policy = with({"--policies", "lru"});
  EXPECT_NE(policy.find("--policies"), std::string::npos) << policy;
  EXPECT_NE(policy.find("lru"), std::string::npos) << policy;
  for (const char* depth : {"1.5", "-0.1", "half", "0.1,,0.9", ""}) {
    const std::string r = with({"--depths", depth});
    EXPECT_NE(r.find("--depths"), std::string::npos) << depth << ": " << r;
    EXPECT_NE(r.find("[0, 1]"), std::string::npos) << depth << ": " << r;
  }
  for (const char* budget : {"0", "1.5", "half"}) {
    EXPECT_NE(with({"--budgets", budget}).find("--budgets"), std::string::npos) << budget;
  }
  EXPECT_NE(with({"--cases", "0"}).find("--cases"), std::string::npos) << with({"--cases", "0"});
  EXPECT_NE(with({"--haystack", "10"}).find("--haystack"), std::string::npos);
  EXPECT_NE(with({"--parts", "retrieval,speed"}).find("speed"), std::string::npos);
}

TEST(EvictionRetrieval, HelpNamesTheDefaultAndFullGrids) {
  std::ostringstream out, err;
  EXPECT_EQ(run_cli({"bench", "eviction", "--help"}, out, err), 0);
  for (const char* word : {"eviction_retrieval.csv", "--full", "--cases", "--depths", "0.1, 0.5, 0.9", "100 cases",
                           "eviction.png", "base-files"}) {
    EXPECT_NE(out.str().find(word), std::string::npos) << word;
  }
  // The grids it states are the ones the bench runs.
  const std::string default_grid = "Default grid: " + std::to_string(default_retrieval_grid().cases) + " cases";
  const std::string full_grid = "--full: " + std::to_string(full_retrieval_grid().cases) + " cases";
  EXPECT_NE(out.str().find(default_grid), std::string::npos) << default_grid;
  EXPECT_NE(out.str().find(full_grid), std::string::npos) << full_grid;
  EXPECT_NE(out.str().find("\n  --full "), std::string::npos);
}

}  // namespace
}  // namespace lorakv::cli
