// cli/bench/episode_runs.cpp: one episode per question, a mode's questions C at a time, and
// each mode's runtime.
#include "lorakv/cli/bench/episode_runs.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

#include "lorakv/agents/workflow_react.h"
#include "lorakv/agents/workflow_types.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"

namespace lorakv::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kRoles[] = {"planner", "actor", "reflector"};

EpisodeResult run_episode(agents::Runtime& rt, const ModeSpec& m, const Question& q, const EpisodeSetup& setup,
                          int64_t row_bytes, int64_t block_size) {
  auto session = rt.open_session({m.mode, m.writer});
  for (const char* role : kRoles) session->add_agent({role, role, ""});
  agents::ReactSpec spec;
  spec.max_steps = setup.max_rounds;
  for (agents::WorkflowAgent* a : {&spec.planner, &spec.actor, &*spec.reflector}) a->options.logprobs = true;
  const agents::ReactResult r = agents::run_react(*session, spec, q.question, *setup.tools);
  EpisodeResult e;
  e.answer = r.answer.value_or("");
  e.finished = r.finished;
  e.success = r.answer && *r.answer == q.answer;
  e.verdict = r.verdict;
  e.consistent = r.planner_actor_consistent;
  e.rounds = r.steps;
  e.transcript = agents::transcript(r);
  for (const agents::WorkflowTurn& t : r.turns) {
    if (t.kind == agents::WorkflowTurn::Kind::kTool) e.turn_margins.emplace_back(t.role, -1.0);
    if (t.kind != agents::WorkflowTurn::Kind::kAgent) continue;
    double smallest = 1e9;
    for (size_t i = 0; i < t.reply.logprobs.size(); ++i) {
      smallest = std::min(smallest, t.reply.logprobs[i] - t.reply.runner_up_logprobs[i]);
    }
    e.turn_margins.emplace_back(t.role, smallest);
    e.min_margin = std::min(e.min_margin, smallest);
  }
  const agents::SessionStats s = session->stats();
  e.tokens = s.trajectory_tokens;
  e.kv_bytes = s.shared_kv_bytes + s.own_kv_bytes + s.residual_kv_bytes + s.private_kv_bytes;
  e.full_caches_bytes = 3 * ((s.trajectory_tokens + block_size - 1) / block_size * block_size) * row_bytes;
  session->close();
  return e;
}

}  // namespace

std::vector<Question> read_questions(const std::string& path, int64_t n) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the questions", {path});
  std::vector<Question> out;
  for (std::string line; std::getline(in, line) && static_cast<int64_t>(out.size()) < n;) {
    if (line.empty()) continue;
    const formats::JsonValue r = formats::parse_json(line);
    out.push_back({r.at("id").as_string(), r.at("question").as_string(), r.at("answer").as_string(), r.at("kind").as_int()});
  }
  return out;
}

std::string ModeSpec::name() const {
  return std::string(runtime::sharing_mode_name(mode)) +
         (mode == runtime::SharingMode::kFull ? "" : std::string(":") + runtime::shared_writer_name(writer));
}

std::unique_ptr<agents::Runtime> open_episode_runtime(const EpisodeSetup& setup) {
  agents::RuntimeOptions ro;
  ro.model = setup.model;
  auto rt = std::make_unique<agents::Runtime>(ro);
  for (const char* role : kRoles) rt->load_adapter(role, setup.adapters + "/" + role);
  return rt;
}

void run_mode(agents::Runtime& rt, const ModeSpec& m, const std::vector<Question>& qs, const EpisodeSetup& setup,
              Clock::time_point start, const std::function<void(const Question&, EpisodeResult)>& done_episode,
              std::ostream& out) {
  const agents::RuntimeStats st = rt.stats();
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex lock;
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < setup.concurrency; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < qs.size(); i = next++) {
        EpisodeResult e = run_episode(rt, m, qs[i], setup, st.base_row_bytes, rt.options().block_size);
        e.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
        std::lock_guard<std::mutex> hold(lock);
        done_episode(qs[i], std::move(e));
        if (++done % 20 == 0 || done == qs.size()) {
          out << "  " << m.name() << ": " << done << "/" << qs.size() << " episodes\n" << std::flush;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  // What the mode ran: the forward rows, and of them the replies processed again at commit
  // (what keeping the author's private rows at commit would save).
  const agents::RuntimeStats after = rt.stats();
  const int64_t rows = after.driver.tokens_processed - st.driver.tokens_processed;
  const int64_t again = after.committed_tokens_processed_again - st.committed_tokens_processed_again;
  out << "  " << m.name() << ": " << rows << " token rows through the model in " << after.driver.steps - st.driver.steps
      << " steps (" << after.driver.run_seconds - st.driver.run_seconds << " s forward); " << again
      << " of them committed replies processed again (" << (rows > 0 ? 100.0 * static_cast<double>(again) / static_cast<double>(rows) : 0.0)
      << "%)\n";
}

}  // namespace lorakv::cli
