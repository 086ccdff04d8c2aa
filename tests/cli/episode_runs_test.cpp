// tests/cli/episode_runs_test.cpp: `lorakv bench episodes` runs each mode on a runtime of its
// own (cli/bench/episode_runs.h). Since the prefix index keys rows by their writers, modes
// run one after another on one runtime give the same episodes too. Checked where that once
// failed: base_lr_shared with writer `first` right after base_shared with writer `base`,
// which adopted the prompt rows the base model wrote and filled its shared C over them. 10
// held-out questions, qv_shared_a, 1 round per episode (the prompt rows are read from the
// planner's first turn on), 10 sessions at once: the first 6, and the 4 of the first 100 whose
// first turn the mixture changed in bench/results/agentic_qa (the planner's first turn over
// rows it wrote itself equals full's; in those 4 it did not).
#include "lorakv/cli/bench/episode_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "lorakv/agents/builtin_tools.h"
#include "lorakv/agents/workflow_types.h"
#include "tests/agents/session_test_util.h"

namespace lorakv::cli {
namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

std::string source(const std::string& relative) {
  return lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/" + relative;
}

// Each question's episode in mode `m` on `rt`, in the questions' order.
std::vector<EpisodeResult> episodes(agents::Runtime& rt, const ModeSpec& m, const std::vector<Question>& qs,
                                    const EpisodeSetup& setup) {
  std::vector<EpisodeResult> out(qs.size());
  std::ostringstream progress;
  run_mode(rt, m, qs, setup, std::chrono::steady_clock::now(),
           [&](const Question& q, EpisodeResult e) {
             const auto at = std::find_if(qs.begin(), qs.end(), [&](const Question& x) { return x.id == q.id; });
             out[static_cast<size_t>(at - qs.begin())] = std::move(e);
           },
           progress);
  return out;
}

// Turn for turn the same, or first different at a near tie (docs/testing.md): a turn whose
// smallest top-1 margin in `reference` is under kBatchMargin, where batch composition may
// order two candidates either way.
::testing::AssertionResult same_episode(const EpisodeResult& reference, const EpisodeResult& other) {
  const std::vector<std::string> a = agents::transcript_turns(reference.transcript);
  const std::vector<std::string> b = agents::transcript_turns(other.transcript);
  size_t d = 0;
  while (d < a.size() && d < b.size() && a[d] == b[d]) ++d;
  if (d == a.size() && d == b.size()) return ::testing::AssertionSuccess();
  const double margin = d < reference.turn_margins.size() ? reference.turn_margins[d].second : -1;
  if (margin >= 0 && margin < agents::testing::kBatchMargin) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "turn " << d << " differs (margin " << margin << ")\n  own runtime: "
                                       << (d < a.size() ? a[d] : "(ended)")
                                       << "\n  shared:      " << (d < b.size() ? b[d] : "(ended)");
}

TEST(EpisodeRuns, ModesOnOneRuntimeGiveTheEpisodesOfModesOnTheirOwn) {
  agents::ToolRegistry tools;
  tools.add(agents::lookup_tool(std::make_shared<agents::DocumentStore>(
      agents::DocumentStore::from_jsonl(source("assets/agentic_qa/kb_test.jsonl")))));
  tools.add(agents::calculator_tool());
  EpisodeSetup setup;
  setup.model = lorakv::testing::test_setting("LORAKV_MODEL");
  setup.adapters = source("assets/role_adapters/qv_shared_a");
  setup.tools = &tools;
  setup.concurrency = 10;
  setup.max_rounds = 1;
  std::vector<Question> qs = read_questions(source("assets/agentic_qa/test.jsonl"), 100);
  const std::set<std::string> mixed_first_turn = {"test-00062", "test-00074", "test-00113", "test-00200"};
  qs.erase(std::remove_if(qs.begin() + 6, qs.end(), [&](const Question& q) { return !mixed_first_turn.count(q.id); }),
           qs.end());
  ASSERT_EQ(qs.size(), 10u);
  const ModeSpec before{SharingMode::kBaseShared, SharedWriter::kBase};
  const ModeSpec after{SharingMode::kBaseLrShared, SharedWriter::kFirst};

  const std::unique_ptr<agents::Runtime> shared = open_episode_runtime(setup);
  (void)episodes(*shared, before, qs, setup);
  const std::vector<EpisodeResult> on_shared = episodes(*shared, after, qs, setup);
  const std::vector<EpisodeResult> on_own = episodes(*open_episode_runtime(setup), after, qs, setup);
  for (size_t i = 0; i < qs.size(); ++i) EXPECT_TRUE(same_episode(on_own[i], on_shared[i])) << qs[i].id;
}

}  // namespace
}  // namespace lorakv::cli
