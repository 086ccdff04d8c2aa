// cli/bench/role_turn_replay.cpp: the turn-by-turn replay (role_turn_replay.h) and the
// concatenated form of bench_memory.h.
#include "lorakv/cli/bench/role_turn_replay.h"

#include <map>

#include "lorakv/runtime/driver.h"

namespace lorakv::cli {

namespace {

int32_t role_reader(const std::string& role) {
  if (role == "planner") return 0;
  if (role == "actor") return 1;
  if (role == "reflector") return 2;
  return -1;
}

}  // namespace

at::Tensor run_role_turn(runtime::Engine& engine, runtime::ReaderRef reader, const RoleTurnInfo& turn,
                         const std::vector<runtime::ReaderRef>& along) {
  std::vector<runtime::DriverJob> jobs(1);
  jobs[0].reader = reader;
  jobs[0].suffix = turn.tokens;
  jobs[0].all_logits = true;
  at::Tensor logits;  // float32 [turn tokens, vocab]
  jobs[0].on_output = [&](const runtime::StepOutput& out) { logits = out.logits; };
  for (const runtime::ReaderRef& other : along) {
    runtime::DriverJob job;
    job.reader = other;
    job.suffix = turn.tokens;
    jobs.push_back(std::move(job));
  }
  runtime::Driver(engine).run(jobs);
  for (const runtime::ReaderRef& other : along) engine.drop_private(other);
  // Row i predicts token i + 1: the text is predicted from the header's last row on.
  const int64_t text_tokens = static_cast<int64_t>(turn.tokens.size()) - turn.header_tokens;
  return logits.narrow(0, turn.header_tokens - 1, text_tokens);
}

std::vector<TurnLogits> replay_turns(BenchWorkload& w, const std::vector<AdapterPtr>& readers,
                                     runtime::ContextOptions mode,
                                     const std::vector<const BenchTrajectory*>& trajectories,
                                     const ReplayOptions& options) {
  runtime::EngineOptions eo;
  eo.per_head_token_sets = options.per_head_token_sets;
  eo.base_rows = 4 * 4096;
  eo.residual_rows = 4 * 4096;
  runtime::Engine engine(w.dense_model(), eo);
  const runtime::ContextId ctx = engine.create_context(mode, readers);
  const std::vector<int32_t> newline = w.encode("\n");
  std::vector<TurnLogits> out;
  for (const BenchTrajectory* t : trajectories) {
    std::map<std::string, int64_t> turns_so_far;  // per role, in this trajectory
    for (const BenchTurn& turn : t->turns) {
      RoleTurnInfo info;
      info.tokens = w.encode("<|im_start|>" + turn.role + "\n");
      info.header_tokens = static_cast<int64_t>(info.tokens.size());
      const std::vector<int32_t> text = w.encode(turn.text);
      info.tokens.insert(info.tokens.end(), text.begin(), text.end());
      info.tokens.push_back(w.im_end);
      info.reader = role_reader(turn.role);
      if (info.reader < 0) {
        info.tokens.insert(info.tokens.end(), newline.begin(), newline.end());
        engine.append(ctx, info.tokens);
        continue;
      }
      info.index = static_cast<int64_t>(out.size());
      info.role = turn.role;
      info.ordinal = ++turns_so_far[turn.role];
      const runtime::ReaderRef reader{ctx, info.reader};
      runtime::prefill(engine, reader);
      std::vector<runtime::ReaderRef> along;
      for (int32_t other = 0; options.every_agent_reads && other < static_cast<int32_t>(readers.size()); ++other) {
        if (other == info.reader) continue;
        runtime::prefill(engine, {ctx, other});
        along.push_back({ctx, other});
      }
      if (options.before_turn) options.before_turn(info, engine, ctx);
      out.push_back({info.role, info.ordinal, run_role_turn(engine, reader, info, along)});
      engine.commit_private(reader);
      engine.append(ctx, newline, info.reader);  // the rest of the agent's turn
    }
  }
  return out;
}

at::Tensor replay_role_turns(BenchWorkload& w, const std::vector<AdapterPtr>& readers, runtime::ContextOptions mode,
                             const std::vector<const BenchTrajectory*>& trajectories, bool per_head_token_sets,
                             bool every_agent_reads) {
  ReplayOptions options;
  options.per_head_token_sets = per_head_token_sets;
  options.every_agent_reads = every_agent_reads;
  std::vector<at::Tensor> rows;
  for (TurnLogits& t : replay_turns(w, readers, mode, trajectories, options)) rows.push_back(std::move(t.logits));
  return at::cat(rows, 0);
}

}  // namespace lorakv::cli
