// tests/cli/episode_rows_test.cpp: `lorakv bench episodes`' CSV and statistics. Rows survive
// a write and a read (quotes, commas and newlines in the transcript; turn margins); a file
// written before the run, elapsed_s and turn_margins columns existed reads with their
// defaults; a cut-short row, a non-number and a missing column are refused naming the file
// and the record. McNemar's exact p against closed forms (2 * sum C(n, i) / 2^n), the Wilson
// interval against its formula evaluated by hand (Python, 96/100 and 0/100).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "lorakv/cli/bench/episode_rows.h"
#include "lorakv/cli/bench/episode_stats.h"
#include "lorakv/common/errors.h"
#include "tests/support/gguf_builder.h"

namespace lorakv::cli {
namespace {

EpisodeRow sample_row() {
  EpisodeRow r;
  r.set = "qv_shared_a";
  r.mode = "base_shared:first";
  r.id = "test-00007";
  r.gold = "Bro \"B\" Vukror";
  r.kind = 4;
  r.result.answer = "Bro, Vukror";
  r.result.verdict = "wrong";
  r.result.transcript = "[planner] Thought: look up X.\nAction: Lookup | [actor] Lookup[X]";
  r.result.success = false;
  r.result.finished = true;
  r.result.consistent = false;
  r.result.rounds = 3;
  r.result.tokens = 215;
  r.result.kv_bytes = 27350400;
  r.result.full_caches_bytes = 31046400;
  r.result.min_margin = 0.25;
  r.result.turn_margins = {{"planner", 1.5}, {"actor", 0.25}, {"tool", -1}};
  r.result.run = "1764820000";
  r.result.elapsed_s = 12.5;
  return r;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(EpisodeRows, ARowSurvivesAWriteAndARead) {
  const std::string path = lorakv::testing::temp_path("episodes_roundtrip.csv");
  write_episode_rows(path, {sample_row(), sample_row()});
  const std::vector<EpisodeRow> rows = read_episode_rows(path);
  ASSERT_EQ(rows.size(), 2u);
  const EpisodeRow& r = rows[1];
  const EpisodeRow want = sample_row();
  EXPECT_EQ(r.set, want.set);
  EXPECT_EQ(r.mode, want.mode);
  EXPECT_EQ(r.id, want.id);
  EXPECT_EQ(r.gold, want.gold);
  EXPECT_EQ(r.kind, 4);
  EXPECT_EQ(r.result.answer, want.result.answer);
  EXPECT_EQ(r.result.transcript, want.result.transcript);
  EXPECT_FALSE(r.result.success);
  EXPECT_TRUE(r.result.finished);
  EXPECT_FALSE(r.result.consistent);
  EXPECT_EQ(r.result.rounds, 3);
  EXPECT_EQ(r.result.tokens, 215);
  EXPECT_EQ(r.result.kv_bytes, 27350400);
  EXPECT_EQ(r.result.full_caches_bytes, 31046400);
  EXPECT_EQ(r.result.min_margin, 0.25);
  EXPECT_EQ(r.result.turn_margins, want.result.turn_margins);
  EXPECT_EQ(r.result.run, "1764820000");
  EXPECT_EQ(r.result.elapsed_s, 12.5);
  // No file: no rows.
  EXPECT_TRUE(read_episode_rows(lorakv::testing::temp_path("episodes_absent.csv")).empty());
}

TEST(EpisodeRows, AFileWithoutTheLaterColumnsReadsWithDefaults) {
  const std::string path = lorakv::testing::temp_path("episodes_old.csv");
  write_text(path,
             "set,mode,id,kind,gold,answer,success,finished,rounds,verdict,planner_actor_consistent,tokens,kv_bytes,"
             "full_caches_bytes,min_margin,transcript\n"
             "alora,full,test-00094,4,\"Bro Vukror\",\"Bro Vukror\",1,1,3,\"right\",1,215,15523200,31046400,1.5995,\"[planner] "
             "a\nb\"\n");
  const std::vector<EpisodeRow> rows = read_episode_rows(path);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].result.success);
  EXPECT_EQ(rows[0].result.transcript, "[planner] a\nb");
  EXPECT_EQ(rows[0].result.run, "");
  EXPECT_EQ(rows[0].result.elapsed_s, 0);
  EXPECT_TRUE(rows[0].result.turn_margins.empty());
}

TEST(EpisodeRows, DamagedFilesAreRefusedNamingTheRecord) {
  const std::string path = lorakv::testing::temp_path("episodes_damaged.csv");
  write_episode_rows(path, {sample_row()});
  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  const auto refusal = [&](const std::string& text) -> std::string {
    write_text(path, text);
    try {
      (void)read_episode_rows(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  // Cut short inside the last row (a run killed mid-write leaves such a line).
  const std::string cut = refusal(good.substr(0, good.size() - 40));
  EXPECT_NE(cut.find("another number of fields"), std::string::npos) << cut;
  EXPECT_NE(cut.find("record 2"), std::string::npos) << cut;
  const std::string not_number = refusal(std::string(good).replace(good.find(",215,"), 5, ",2x5,"));
  EXPECT_NE(not_number.find("tokens"), std::string::npos) << not_number;
  const std::string no_column = refusal(std::string(good).replace(good.find("kv_bytes"), 8, "kv_bites"));
  EXPECT_NE(no_column.find("kv_bytes"), std::string::npos) << no_column;
  EXPECT_EQ(refusal(good), "accepted");
}

TEST(EpisodeStats, McNemarExactAgainstClosedForms) {
  EXPECT_EQ(mcnemar_exact_p(0, 0), 1.0);
  // b = 43, c = 1: 2 * (C(44,0) + C(44,1)) / 2^44 = 90 / 2^44.
  EXPECT_NEAR(mcnemar_exact_p(43, 1), 90.0 / 17592186044416.0, 1e-12 * 90.0 / 17592186044416.0);
  EXPECT_NEAR(mcnemar_exact_p(1, 43), 90.0 / 17592186044416.0, 1e-12 * 90.0 / 17592186044416.0);
  // b = 5, c = 2: 2 * (1 + 7 + 21) / 128.
  EXPECT_NEAR(mcnemar_exact_p(5, 2), 58.0 / 128.0, 1e-12);
  EXPECT_EQ(mcnemar_exact_p(3, 3), 1.0);  // 2 * P(X <= 3 | n = 6) > 1: capped
}

TEST(EpisodeStats, WilsonIntervalAgainstItsFormula) {
  // (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z = 1.959963984540054.
  const auto [lo, hi] = wilson_interval(96, 100);
  EXPECT_NEAR(lo, 0.9016292856411208, 1e-12);
  EXPECT_NEAR(hi, 0.9843366960084523, 1e-12);
  const auto [lo0, hi0] = wilson_interval(0, 100);
  EXPECT_NEAR(lo0, 0.0, 1e-12);
  EXPECT_NEAR(hi0, 0.03699349820698568, 1e-12);
}

}  // namespace
}  // namespace lorakv::cli
